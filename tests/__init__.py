"""Cross-package and end-to-end tests (the soak program they run is ``testsupport.soak``)."""

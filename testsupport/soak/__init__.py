"""The seeded soak: ``python -m testsupport.soak`` (``make soak``; the program is ``__main__``), its graph
(``graph``) and what it watches while runners run (``observe``). ``tests/test_soak.py`` runs it at a small count."""

"""Data-curation experiments: web pages to a trained model through extraction, dedup, quality and decontamination."""

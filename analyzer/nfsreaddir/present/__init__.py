"""What the commands show: text, JSON, plots, exports, comparisons, a run's results.json and
tables, the glossary. Presentation reads no trace and judges nothing: it is given what the
pipeline made."""

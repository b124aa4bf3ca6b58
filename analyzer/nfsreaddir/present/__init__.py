"""What the commands show: text, JSON, plots, exports, comparisons, reproducers' runs side by
side, the glossary. Presentation reads no trace, runs no pipeline and judges nothing: it is given
what the pipeline made (tests/test_layers.py)."""

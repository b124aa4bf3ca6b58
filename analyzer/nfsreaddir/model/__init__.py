"""What a trace says, as figures: readdir listings (from trace events or from the wire), their
restarts and invalidations, slab growth, and the dcache samples of the dcache reproducers.
Nothing here judges: the rules do."""

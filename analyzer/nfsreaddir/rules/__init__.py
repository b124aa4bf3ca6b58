"""Every verdict: the readdir listings' (verdict) and the dcache reproducers' (dcache_judge), and
the limits they start from."""

"""Find NFS readdir cookie restarts, cache invalidations and dcache growth in kernel traces."""

__version__ = "0.1.0"

"""Units the analyses share."""

NS = 1_000_000_000      # nanoseconds in a second: trace time stamps are in ns

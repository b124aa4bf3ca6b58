"""The limits the rules start from unless a run's facts or the command line say otherwise, in a
module of their own so that the command line's help and the run's facts name them without
loading the analyses."""

# Without cookies: the modified listing's READDIRs against the idle one's that a run allows.
MAX_RATIO = 1.5

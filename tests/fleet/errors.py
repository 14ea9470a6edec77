class FleetError(Exception):
    """The fleet could not be set up or run (not a verdict on Relay)."""

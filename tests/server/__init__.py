"""Tests of the service (hearth.server), its CLI client and the real-client compatibility."""

"""Support code shared by the test suites."""

"""The test suites: tools, patch tripwires, integration."""

"""The driver and the policy ranks: the messages they exchange, the runner that starts the ranks
(in-process or Ray actors), the rank itself, and the conversions into what the worker takes."""

"""Where the ranks run on Ray (placement, a local or an attached cluster) and naming the cause
when a call across them fails."""

"""What the user reads: the table, JSON, GitHub and SARIF reports, `explain`, the baseline gate."""

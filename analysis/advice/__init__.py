"""Capture health and advice: can a capture be trusted (health), what to change and how much it can save
(findings), and the expert-system rules of `nsys analyze` (nsys_rules), each a function of a Trace."""

"""The results database, split by what it stores; its schema and migrations beside it."""

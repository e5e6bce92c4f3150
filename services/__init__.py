"""The service layer: one function per use case, taking ports and settings, returning plain
results. It never sends messages; the Functions layer sends what the results say."""

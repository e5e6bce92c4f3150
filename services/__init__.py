"""The service layer: one function per use case, taking ports and domain values (timeouts,
bounds, policies, the reply-queue allow-list), returning plain results. It never reads app
settings and never sends messages; the Functions layer does both."""

"""The service: one lifespan that owns every run, the reads, the principal-scoped view doors get, files by path,
the pool catalogue and the named tokens."""

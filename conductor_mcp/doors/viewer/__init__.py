"""The run viewer: /ui/ pages (list, run, graph, timeline, diffs), its sign-in and static files."""

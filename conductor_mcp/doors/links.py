"""Where a person can see a run: the run viewer's address, when this server serves one (HTTP only)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Links:
    """The viewer's base URL (`http://host:port/ui/`), given by whoever serves it; None when nothing does."""

    viewer_base: str | None = None

    def run(self, run_id: str) -> str | None:
        """The viewer's page for a run, when a viewer is served."""
        return f"{self.viewer_base}runs/{run_id}" if self.viewer_base else None

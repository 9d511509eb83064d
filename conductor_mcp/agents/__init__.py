"""Agents on the team: agent CLIs (Codex, Claude Code, any command) and tool-using models, each working in its
own workspace, a copy of the caller's repository.

    workspace, git, diffs   a workspace per agent step: a git worktree (or a copy), its base and its diff
    owner                   the owner of every workspace: runs' scopes, the disk budget, the agents' cap
    process                 an agent's process: its environment, its process group, its deadline
    adapter, codex, claude, command   one interface over the agent CLIs; what each one's output says
    tools, loop             workspace tools (read, search, run under bubblewrap) and a bounded tool loop

This layer sits beside models/ and runs/: it imports core and below, never the engine or the service.
"""

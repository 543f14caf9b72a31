"""The sandbox: running code on a user's behalf, bounded.

One package for every process the bus starts for someone (shell hooks, Claude Code command hooks, ``hookbus
isolate``): ``process`` (the child, its output tail, its process group killed with a grace), ``security`` (the
command, working directory and environment rules, and the NATS URL without credentials), ``isolation`` (the one
sandbox builder: bubblewrap, rlimits, a pids cgroup) and ``outcome`` (how a run ended, for shell hooks and
plugins alike).
"""

"""Crash tests: a child process killed with SIGKILL at named points, then restarted (`make chaos` runs every point)."""

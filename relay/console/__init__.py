"""The console: a web page for the fleet, its functions, their runs and dead letters (docs/console.md).

Served by ``relay start`` on CONSOLE_ADDR, or alone by ``relay console``;
bottle on gevent, every asset in the package. The workers' heartbeats it
shows are written here too (``heartbeat``).
"""

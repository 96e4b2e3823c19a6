"""``python -m sshpipe``: argument parsing, output for a terminal, the demo.

Everything a server says is escaped before it reaches the terminal
(``main.say``). uvloop is loaded here, never by the library.

May import: the public API (``sshpipe``), ``_config``, ``_errors``, ``testing.embedded``
(the demo's server).
"""

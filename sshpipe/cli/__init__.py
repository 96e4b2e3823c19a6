"""``python -m sshpipe``: the words (``words`` arranges them, ``args`` parses them,
``targets`` reads a remote path or URL, ``settings`` makes the configs), what is
printed (``output``), the log-in's prompts on the terminal (``prompt``), running a
command (``main``), the demo.

Everything a server says is escaped before it reaches the terminal
(``output.say``). uvloop is loaded here, never by the library.

May import: the public API (``sshpipe``), ``_config``, ``_errors``, ``_prompt``,
``testing.embedded`` (the demo's server).
"""

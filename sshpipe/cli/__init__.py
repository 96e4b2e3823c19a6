"""``python -m sshpipe``: the words (``words`` arranges them, ``args`` parses them,
``targets`` reads a remote path or URL, ``settings`` makes the configs), what is
printed (``output``; the progress display in ``display``, rich's when the
``cli`` extra is there; the log's levels for ``-q``/``-v`` in ``verbosity``),
the log-in's prompts on the terminal (``prompt``), running a command
(``main``), sweeping what dead runs left (``clean``), the demo.

Everything a server says is escaped before it reaches the terminal
(``output.say``). uvloop and rich are loaded here, never by the library.

May import: the public API (``sshpipe``), ``_config``, ``_errors``, ``_prompt``,
``testing.embedded`` (the demo's server), ``core.timeline.describe`` (``-v``'s
phases), ``transport.negotiation.asyncssh_debug`` (``-vvv``: asyncssh stays imported
in ``transport``) and ``durability.ledger`` (``clean`` without a host: no client).
"""

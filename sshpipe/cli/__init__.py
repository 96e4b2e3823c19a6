"""``python -m sshpipe``: the words (``words`` arranges them, ``args`` parses them,
``version`` answers --version, ``targets`` reads a remote path or URL,
``settings`` makes the configs), what is printed (``output``; the progress
display in ``display``, rich's when the ``cli`` extra is there; the log's
levels for ``-q``/``-v`` in ``verbosity``), the log-in's prompts on the
terminal (``prompt``), the exit code (``main``, which loads the rest only
once the words name a command to run), running a command that connects
(``command``), connection reuse (``controlpath`` finds the master,
``control`` starts and asks it; a later get or put is run by the master for a
``thin`` client, ``thinserve`` its side), sweeping what dead runs left (``clean``), the demo.

Everything a server says is escaped before it reaches the terminal
(``output.say``). uvloop and rich are loaded here, never by the library.

May import: ``sshpipe`` (its version), the front door (``client``), ``core``,
``transport`` (a command line serves -o ControlMaster as ssh does: the mux
master, ssh_config's own words, -vvv's asyncssh log), ``durability`` (the
clean verb without a host: no client), ``testing`` (the demo's embedded server
and link emulator), and outside the standard library ``rich`` and ``uvloop``.
"""

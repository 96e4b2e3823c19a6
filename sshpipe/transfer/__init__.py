"""One file: keep requests in flight over a lease's channels, feed replies to the core.

"Ask the core -> await I/O -> feed the core". The pipeline, top to bottom:

- ``download`` / ``upload`` / ``stream``: one file end to end (temp name,
  verify, commit, or bytes yielded in order), each attempt run inside the
  reconnect loop of ``retrying``; ``sending``: an upload's WRITEs across its
  reconnects (what is sent, what is acknowledged);
- ``readpump`` / ``writepump``: READs or WRITEs in flight, replies fed to the
  read plan or the acknowledgement count;
- ``pumpsetup``: the one set-up and take-down of either pump (controller,
  grower, switch, handles closed) and the set-up's timing;
- ``pump``: what both share (lanes, flight budget, flow controller, error,
  wake-ups; a stall is the sessions' watchdog's to find, see ``transport.requests``);
  it knows the switch only through a ``RouteSwitch`` protocol and imports
  none of the modules above it;
- ``grower``: more channels while the flow controller wants them;
- ``lanes``: the file's handle on each channel;
- ``verify``: the end-to-end hash check before the final rename;
- ``readback``: a resumed upload's journaled ranges read back and hashed
  (the journal itself is ``durability.putresume``'s);
- ``blockprobe``: the block a server without limits@openssh.com takes whole;
- ``inorder``: uploads in file order on one channel, where a server needs it;
- ``progress``: a transfer's counts reported to the user's ``progress=`` callback;
- ``channelspec``: a ``TransferConfig`` unpacked, once per lease, into the
  ``transport.lease.ChannelSpec`` the pool reads;
- ``compressswitch`` / ``compressauto`` / ``probetrain``: Compression auto's
  per-file route, the switch made for a routed lease, and the replies that
  measure a WAN link for it (first, and afresh).

May import: ``core``, ``local``, ``transport``, ``durability``.
"""

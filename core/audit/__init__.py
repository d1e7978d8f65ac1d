"""The audit record: one package, one direction.

Each workspace has a hash chain of append-only events (`event`: the row), and the system has one. A
service records an event with `trail.record()` in the transaction of the change it describes; the event
registry (`actions`) says what each action may record. After commit the chains' new heads are signed into
a log outside the database (`checkpoints`, with the key of `keys`), and that log's own end is signed into
an anchor (`anchor`). `verification` checks all of it; `export` hands it out.

The direction, each module importing only those below it (.importlinter: the audit record's layers):
    verification | export
    trail
    checkpoints
    chains | anchor
    actions | keys | event
"""

"""The task's page: its read-only fields, grouped by what they tell, each a function of one task
that `TaskAdmin.fieldsets` names.

| module | tells |
|---|---|
| `layout` | which fields stand on which line of the page |
| `address` | which task a page's address names: its id, or its rn (redirected to the id) |
| `times` | when: created, updated, the delayed start, the deadline, expiry, dead letter |
| `family` | its relatives: parent, children, the parents a follow-up waits for, its batch |
| `keys` | the keys it names: locks, limits, order key, rate, unique key |
| `waiting` | why a ready task waits, and when it is expected to start |
| `origin` | who submitted it, and the trace it belongs to |
| `usage` | what its last run used: CPU time, peak memory |
| `durable` | a durable task's steps, waits and signals |
| `payload` | its spec, result, errors and log |
| `history` | its History, newest first |
"""

"""Teams (issue 20, TEAM-1..4; seed 003's multi-agent architecture): long-lived teammates with
mailboxes, status labels, autonomous claiming and a git worktree each.

A team belongs to an orchestrator session (the lead's; its id is the team's). A teammate is a
member of the roster (name, role = agent definition, status, current step, worktree) with a
session of its own, linked to the lead's; it works in runs of that session, one after another:

- **Mailboxes.** Every member, and the lead, has an append-only inbox (`Mailbox`: locked,
  fsynced, a torn last line ignored). A member's loop starts a run when mail arrives; during a
  run, mail that arrives is handed to the model at the start of the next turn, labelled by its
  sender (a ``mail`` message). `send_message` refuses unknown kinds at send time.
- **Status labels.** ``idle`` (waiting for mail or work), ``working`` (a run is on),
  ``waiting_approval`` (it asked the lead to approve a plan and waits for the answer),
  ``stopped`` (it acknowledged a shutdown). Each change is saved in the roster (a mark of the
  lead's session in the session store) and is a `team_changed` event.
- **Autonomous claiming.** An idle member looks for ready steps of the lead's task graphs whose
  conditions (a role, tools, labels) it meets, and is given one to claim; the claim goes
  through the Task WAL's lease protocol (as the member: its claims outlive its runs), so a
  step whose holder died is taken up by another member once the lease expires.
- **Shutdown.** A ``shutdown_request`` is graceful: the member's run (if any) ends, the steps it
  holds are released, it answers ``shutdown_ack`` and stops.
- **Handoff.** A ``handoff`` mail moves a step (the sender releases it; the recipient is told to
  claim it) and copies the named artifacts into the recipient's session.
- **Worktrees.** With `agents.worktrees` (default: when the project is a git repository) each
  member works in its own `git worktree` (its file tools and its commands' sandbox write only
  there); the lead reviews, accepts (merges; a conflict is reported, never forced) or rejects
  it. A stopped member's worktree is removed once nothing in it is left unreviewed.
- **Restarts.** The roster, the inboxes and the task WALs are on disk, so when the lead's
  session is resumed in a new process its members come back (a member that was working is
  idle again; its session resumes with the interrupted calls answered), with their unread
  mail.
"""

"""Team mailboxes on disk: ``<root>/<team>/<member>.inbox.jsonl``, one append-only inbox each."""

from soong_agent.adapters.mailbox.file_mailbox import FileMailbox

__all__ = ["FileMailbox"]

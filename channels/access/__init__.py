"""Who may talk to a bot: allow lists, the overlay of approved senders, pairing codes and the
stores that keep them."""

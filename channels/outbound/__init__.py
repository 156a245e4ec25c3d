"""Replies on their way out: the manager of a profile's channels, the router from the bus to
per-chat lanes, delivery fitted to the channel, stream editing and the typing indicator."""

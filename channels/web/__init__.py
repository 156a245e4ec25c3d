"""The HTTP side of channels: listener hardening (connection limits, `Host` and `Origin`
checks), webhook refusals and acknowledgements, and the client a platform's JSON API is
called with (one session, one cached access token)."""

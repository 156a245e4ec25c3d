"""A real mail server, Postfix and Dovecot from Debian's packages, for the email channel's tests.

`.ci/run` installs the packages (postfix, dovecot-imapd, dovecot-lmtpd, postgrey) without
letting their own services start. Each `MailServer` runs private instances on free 127.0.0.1
ports, from a directory of its own: Postfix (`postfix -c DIR`) accepts SMTP from loopback for
the test domain and hands each message over LMTP to Dovecot, which files it into the account's
Maildir and serves it over IMAP (every address at the domain is an account, all with one
password). Both offer STARTTLS with a certificate made for the test. postgrey greylists mail to
the accounts made with `greylisted=True`. Postfix and Dovecot can each be stopped and started
again on the same ports and data, as an outage is.

The directory is made with `mkdtemp`, not in pytest's: its path must stay short (Postfix's and
Dovecot's unix sockets live in it) and readable by the unprivileged users the servers switch
to, which pytest's private directories are not. Postfix needs root to start, so these tests do
too.
"""

from __future__ import annotations

import asyncio
import email.policy
import os
import pwd
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from types import TracebackType
from typing import Self

import aiosmtplib
import pytest

from tests.fakes.tls import Certificate, make_certificate
from tests.support.daemon import free_port

POSTFIX = Path("/usr/sbin/postfix")
DOVECOT = Path("/usr/sbin/dovecot")
#: Dovecot's LMTP server, a package of its own (dovecot-lmtpd).
DOVECOT_LMTP = Path("/usr/lib/dovecot/lmtp")
POSTGREY = Path("/usr/sbin/postgrey")
DOMAIN = "octos.test"
#: Postfix's LMTP client and Dovecot's mail processes act as this user, never as root.
MAIL_USER = "nobody"
#: How long postgrey turns a new (client, sender, recipient) away; a reply retried with the
#: channel's backoff gets through on a later attempt.
GREYLIST_DELAY_S = 5
#: Longest wait for a server to answer after a start.
START_WAIT_S = 30.0
_GREYLISTED_PREFIX = "greylisted-"


def require_mailserver() -> None:
    """Skips the test when Postfix, Dovecot or postgrey is missing (or this is not root),
    except in CI, where it fails."""
    programs = (POSTFIX, DOVECOT, DOVECOT_LMTP, POSTGREY)
    missing = [str(path) for path in programs if not path.is_file()]
    if not missing and os.geteuid() == 0:
        return
    reason = (
        f"a real mail server needs {', '.join(missing)}: `apt-get install postfix "
        "dovecot-imapd dovecot-lmtpd postgrey` (postfix: 'No configuration'), as .ci/run does"
        if missing
        else "a real Postfix starts only as root"
    )
    if os.environ.get("CI", "").lower() not in {"", "0", "false"}:
        pytest.fail(f"{reason} (CI must run the real-server tests; .ci/run installs them)")
    pytest.skip(reason)


@dataclass(frozen=True)
class MailAccount:
    address: str
    password: str

    @property
    def localpart(self) -> str:
        return self.address.partition("@")[0]


class MailServer:
    """Postfix, Dovecot and postgrey in one private directory; `async with` starts them all."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="octos-mail-"))
        self.directory.chmod(0o755)
        self.smtp_port = free_port()
        self.imap_port = free_port()
        self._lmtp_port = free_port()
        self._policy_port = free_port()
        self._mail_user = pwd.getpwnam(MAIL_USER)
        self.certificate: Certificate = make_certificate(self.directory / "tls")
        self._postfix_config = self.directory / "postfix"
        self._dovecot_config = self.directory / "dovecot" / "dovecot.conf"
        #: Every account's password: any address at the domain is an account.
        self._password = secrets.token_hex(8)
        self._mail = self.directory / "mail"
        self._postfix_running = False
        self._dovecot: asyncio.subprocess.Process | None = None
        self._postgrey: asyncio.subprocess.Process | None = None
        self._write_postfix_config()
        self._write_dovecot_config()
        self._write_postgrey_dirs()

    # Configuration

    def _write_postfix_config(self) -> None:
        config, root = self._postfix_config, self.directory
        config.mkdir()
        # Postfix checks that its queue is root's and its data directory its own.
        (root / "queue").mkdir()
        (root / "data").mkdir()
        shutil.chown(root / "data", user="postfix")
        # Every address at the domain goes to Dovecot, which refuses those without an account.
        (config / "mailboxes").write_text(f"/@{re.escape(DOMAIN)}$/ dovecot\n")
        (config / "greylisted").write_text(f"/^{_GREYLISTED_PREFIX}[^@]*@/ greylisted\n")
        (config / "main.cf").write_text(
            f"""\
compatibility_level = 3.6
queue_directory = {root}/queue
data_directory = {root}/data
maillog_file = {root}/maillog
maillog_file_prefixes = {root}
mail_owner = postfix
setgid_group = postdrop
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
myhostname = mail.{DOMAIN}
mydomain = {DOMAIN}
mydestination =
mynetworks = 127.0.0.0/8
alias_maps =
alias_database =
biff = no
smtputf8_enable = no
virtual_mailbox_domains = {DOMAIN}
virtual_mailbox_maps = regexp:{config}/mailboxes
virtual_transport = lmtp:inet:127.0.0.1:{self._lmtp_port}
# A test waits seconds, not Postfix's usual minutes, for what was deferred (Dovecot away).
queue_run_delay = 1s
minimal_backoff_time = 1s
maximal_backoff_time = 2s
smtpd_tls_security_level = may
smtpd_tls_cert_file = {self.certificate.cert_path}
smtpd_tls_key_file = {self.certificate.key_path}
smtpd_restriction_classes = greylisted
greylisted = check_policy_service inet:127.0.0.1:{self._policy_port}
smtpd_recipient_restrictions = reject_unauth_destination,
    check_recipient_access regexp:{config}/greylisted
"""
        )
        services = [
            f"127.0.0.1:{self.smtp_port} inet n - n - - smtpd",
            "pickup unix n - n 60 1 pickup",
            "cleanup unix n - n - 0 cleanup",
            "qmgr unix n - n 300 1 qmgr",
            "tlsmgr unix - - n 1000? 1 tlsmgr",
            "rewrite unix - - n - - trivial-rewrite",
            "bounce unix - - n - 0 bounce",
            "defer unix - - n - 0 bounce",
            "trace unix - - n - 0 bounce",
            "verify unix - - n - 1 verify",
            "flush unix n - n 1000? 0 flush",
            "proxymap unix - - n - - proxymap",
            "proxywrite unix - - n - 1 proxymap",
            "smtp unix - - n - - smtp",
            "relay unix - - n - - smtp",
            "showq unix n - n - - showq",
            "error unix - - n - - error",
            "retry unix - - n - - error",
            "discard unix - - n - - discard",
            "lmtp unix - - n - - lmtp",
            "anvil unix - - n - 1 anvil",
            "scache unix - - n - 1 scache",
            "postlog unix-dgram n - n - 1 postlogd",
        ]
        (config / "master.cf").write_text("\n".join(services) + "\n")

    def _write_dovecot_config(self) -> None:
        directory = self._dovecot_config.parent
        directory.mkdir()
        (directory / "state").mkdir()
        self._mail.mkdir()
        os.chown(self._mail, self._mail_user.pw_uid, self._mail_user.pw_gid)
        uid, gid = self._mail_user.pw_uid, self._mail_user.pw_gid
        self._dovecot_config.write_text(
            f"""\
instance_name = {self.directory.name}
base_dir = {directory}/run
state_dir = {directory}/state
log_path = {self.directory}/dovecot.log
hostname = mail.{DOMAIN}
protocols = imap lmtp
listen = 127.0.0.1
ssl = yes
ssl_cert = <{self.certificate.cert_path}
ssl_key = <{self.certificate.key_path}
disable_plaintext_auth = no
auth_mechanisms = plain login
passdb {{
  driver = static
  args = password={self._password}
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={self._mail}/%Ln allow_all_users=yes
}}
mail_location = maildir:{self._mail}/%Ln
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.imap_port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {self._lmtp_port}
  }}
}}
"""
        )

    def _write_postgrey_dirs(self) -> None:
        database = self.directory / "postgrey"
        database.mkdir()
        shutil.chown(database, user="postgrey")

    # Accounts and mail

    def account(self, name: str, *, greylisted: bool = False) -> MailAccount:
        """A mailbox at the server (every address at the domain has one, made by its first
        mail); mail to a `greylisted` one is turned away by postgrey at first."""
        localpart = f"{_GREYLISTED_PREFIX}{name}" if greylisted else name
        return MailAccount(f"{localpart}@{DOMAIN}", self._password)

    async def send(self, raw: bytes, *, sender: str, recipient: str) -> None:
        """Mail `raw` as a person's mail program would: SMTP to the server, upgraded to TLS."""
        await aiosmtplib.send(
            raw,
            sender=sender,
            recipients=[recipient],
            hostname="127.0.0.1",
            port=self.smtp_port,
            start_tls=True,
            tls_context=self._client_tls(),
        )

    def _client_tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certificate.cert_path))

    async def mailbox(self, account: MailAccount) -> list[EmailMessage]:
        """The messages in the account's Maildir, oldest first, read from the disk."""
        return await asyncio.to_thread(self._read_maildir, self._mail / account.localpart)

    @staticmethod
    def _read_maildir(maildir: Path) -> list[EmailMessage]:
        files = [path for part in ("new", "cur") for path in (maildir / part).glob("*")]
        # A Maildir file's name starts with its delivery time (seconds, then a unique part).
        files.sort(key=lambda path: (path.stat().st_mtime, path.name))
        parser = BytesParser(policy=email.policy.default)
        messages: list[EmailMessage] = []
        for path in files:
            message = parser.parsebytes(path.read_bytes())
            assert isinstance(message, EmailMessage)
            messages.append(message)
        return messages

    def maillog(self) -> str:
        path = self.directory / "maillog"
        return path.read_text(errors="replace") if path.exists() else ""

    def last_output(self, lines: int = 30) -> str:
        text = ""
        for name in ("maillog", "dovecot.log", "postgrey.log"):
            path = self.directory / name
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    # Running

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        await self.start_postgrey()
        await self.start_dovecot()
        await self.start_postfix()

    async def close(self) -> None:
        """Stops everything and removes the directory."""
        await self.stop_postfix()
        await self.stop_dovecot()
        await _terminate(self._postgrey)
        self._postgrey = None
        await asyncio.to_thread(shutil.rmtree, self.directory, True)

    async def start_postfix(self) -> None:
        """Starts Postfix; it listens once this returns (`postfix start` waits for that)."""
        assert not self._postfix_running, "already running"
        await self._postfix("start")
        self._postfix_running = True

    @property
    def postfix_running(self) -> bool:
        return self._postfix_running

    async def stop_postfix(self) -> None:
        """Stops Postfix: SMTP connections are refused until `start_postfix()`."""
        if self._postfix_running:
            self._postfix_running = False
            await self._postfix("stop")

    async def _postfix(self, command: str) -> None:
        # The postfix command writes to a terminal only; what it says goes to the maillog.
        process = await asyncio.create_subprocess_exec(
            str(POSTFIX),
            "-c",
            str(self._postfix_config),
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if await process.wait() != 0:
            raise RuntimeError(f"postfix {command} failed:\n{self.last_output()}")

    async def start_dovecot(self) -> None:
        assert self._dovecot is None, "already running"
        with (self.directory / "dovecot.log").open("ab") as log:
            self._dovecot = await asyncio.create_subprocess_exec(
                str(DOVECOT),
                "-F",
                "-c",
                str(self._dovecot_config),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        await self._listening(self._dovecot, self.imap_port, "Dovecot")

    async def stop_dovecot(self) -> None:
        """Stops Dovecot: IMAP sessions are cut and new ones refused, and what Postfix
        receives meanwhile waits in its queue, until `start_dovecot()`."""
        process, self._dovecot = self._dovecot, None
        await _terminate(process)

    async def start_postgrey(self) -> None:
        assert self._postgrey is None, "already running"
        with (self.directory / "postgrey.log").open("ab") as log:
            self._postgrey = await asyncio.create_subprocess_exec(
                str(POSTGREY),
                f"--inet=127.0.0.1:{self._policy_port}",
                f"--dbdir={self.directory / 'postgrey'}",
                f"--delay={GREYLIST_DELAY_S}",
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        await self._listening(self._postgrey, self._policy_port, "postgrey")

    async def _listening(self, process: asyncio.subprocess.Process, port: int, name: str) -> None:
        deadline = time.monotonic() + START_WAIT_S
        while True:
            if process.returncode is not None:
                raise RuntimeError(f"{name} exited at start:\n{self.last_output()}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} did not listen:\n{self.last_output()}") from None
                # Polled: neither server gives another sign that it listens.
                await asyncio.sleep(0.1)
                continue
            writer.close()
            await writer.wait_closed()
            return


async def _terminate(process: asyncio.subprocess.Process | None) -> None:
    if process is None or process.returncode is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), 30)
    except TimeoutError:
        process.kill()
        await process.wait()

"""``cloister sync``: the agent's commits into the human's repository, and back.

A cloister commits to a git directory of its own (``<data>/gitdirs/<cloister>``), which
no host process ever opens. A sync:

1. runs ``cloister-git-export`` in a throwaway container (no network, no capabilities,
   read-only root; the cloister's git directory and the human's objects read-only, an
   empty output directory the only writable place): git itself fetches the agent's
   branches, with ``transfer.fsckObjects``, into a fresh repository whose alternate is
   the human's object store, and leaves the pack it received and the ref list;
2. takes the pack into the human's repository with ``git index-pack --strict`` (what
   git does with any pack from a remote), reading the file without following a link;
3. sets ``refs/cloister/<cloister>/<branch>`` to the agent's branches (never a ref of
   the human's), checked line by line (:func:`cloister_core.owngit.parse_refs`);
4. fast-forwards the branch the human has checked out (a worktree cloister's branch, if
   nothing has it checked out) when it is still where the agent's work began, nothing
   is staged, and the new commits add no gitlink and change neither ``.gitmodules`` nor
   a protected path (unless the human said yes): git's own index lock is held while
   the human's index is brought along;
5. while the cloister runs, moves its branches that the agent left alone to where the
   human moved them, and mirrors the human's branches as ``host/<branch>`` in it: a
   command run *inside* the cloister (``docker exec``), so the host writes nothing the
   agent can write.

One sync of a cloister at a time (a lock file); the session record keeps, per branch,
the last commit both sides agreed on.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cloister_core import beneath, stack
from cloister_core.errors import CloisterError
from cloister_core.fileio import atomic_write, locked
from cloister_core.gitrun import GitError, run_git
from cloister_core.owngit import (
    EXPORT_OUTPUT,
    EXPORT_SOURCE,
    HOST_REMOTE,
    ORIGIN_ALTERNATES,
    ORIGIN_OBJECTS,
    ExportError,
    Head,
    agent_ref,
    parse_head,
    parse_refs,
    plan_sync,
    touches_protected,
)
from cloister_core.paths import CloisterPaths
from cloister_core.repository import HumanRepository
from cloister_core.sessions import SessionRecord, read_session, update_session
from cloister_executor.engine import Bind, ContainerSpec, Engine, EngineError

EXPORT_TIMEOUT = 300.0
EXEC_TIMEOUT = 30.0
MAX_LIST_BYTES = 8 * 1024 * 1024
GITLINK = "160000"


class SyncError(CloisterError):
    """The cloister's work could not be brought back; nothing of the human's changed."""


@dataclass(slots=True)
class SyncOutcome:
    """What one sync did, and what it did not do and why."""

    cloister: str
    imported: dict[str, str] = field(default_factory=dict)  # branch -> commit, changed
    removed: list[str] = field(default_factory=list)
    fast_forwarded: tuple[str, str | None, str] | None = None  # (branch, from, to)
    to_cloister: dict[str, str] = field(default_factory=dict)  # branch -> commit, in it
    notes: list[str] = field(default_factory=list)
    head: Head = field(default_factory=Head)  # where the cloister's HEAD was
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.imported or self.removed or self.fast_forwarded or self.to_cloister)

    def lines(self) -> list[str]:
        """One line per thing done or not done, for a person."""
        found = [
            f"{agent_ref(self.cloister, branch)} is now {oid[:12]}"
            for branch, oid in sorted(self.imported.items())
        ]
        found += [f"{agent_ref(self.cloister, branch)} removed" for branch in self.removed]
        if self.fast_forwarded is not None:
            branch, old, new = self.fast_forwarded
            found.append(
                f"your {branch} fast-forwarded to the agent's ({(old or 'nothing')[:12]}"
                f" -> {new[:12]})"
            )
        found += [
            f"the cloister's {branch} moved to your {oid[:12]}"
            for branch, oid in sorted(self.to_cloister.items())
        ]
        return found + self.notes


@dataclass(frozen=True, slots=True)
class _Exported:
    refs: dict[str, str]
    skipped: dict[str, str]  # branch (as ASCII) -> why it does not come back
    head: Head
    pack: Path | None


# -- the human's repository (host git, hardened) ------------------------------------------


def _haves(human: HumanRepository, cloister: str) -> list[str]:
    """What the human's repository has already: what the export need not send."""
    output = human.git(
        "for-each-ref",
        "--format=%(objectname)",
        "refs/heads/",
        "refs/tags/",
        "refs/remotes/",
        agent_ref(cloister, ""),
    )
    return sorted(set(output.split()))


def _short_refs(human: HumanRepository, prefix: str) -> dict[str, str]:
    return {name.removeprefix(prefix): oid for name, oid in human.refs(prefix).items()}


def _hazards(
    human: HumanRepository, old: str | None, new: str, protected: Sequence[str]
) -> list[str]:
    """What the commits from *old* to *new* change that a fast-forward must not make the
    human's without a yes: gitlinks (git would enter a repository the agent made),
    ``.gitmodules``, protected paths."""
    output = human.git("diff-tree", "-r", "-z", "--no-renames", old or human.empty_tree(), new)
    fields = output.split("\0")
    found: list[str] = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        parts = meta.lstrip(":").split()
        if len(parts) < 2:
            continue
        if parts[1] == GITLINK and parts[0] != GITLINK:
            found.append(f"adds a gitlink at {path!r} (your git would enter it)")
        elif path == ".gitmodules":
            found.append("changes .gitmodules")
        elif touches_protected(path, protected):
            found.append(f"changes {path!r}, a protected path (or the way to one)")
    return found


# -- the sync -------------------------------------------------------------------------------


@dataclass
class Syncer:
    """Syncs cloisters of one data directory through one engine."""

    paths: CloisterPaths
    engine: Engine
    fast_forward: bool = True
    uid_gid: str = field(default_factory=lambda: f"{os.getuid()}:{os.getgid()}")

    @property
    def instance(self) -> stack.Instance:
        """Whose containers these are (:class:`cloister_core.stack.Instance`)."""
        return stack.Instance.of(self.paths, os.getuid())

    def lock(self, cloister: str) -> contextlib.AbstractContextManager[None]:
        return locked(self.paths.git_dirs_dir / f"{cloister}.sync")

    def sync(
        self,
        cloister: str,
        *,
        running: bool,
        assume_yes: bool = False,
        ready: Callable[[], None] | None = None,
    ) -> SyncOutcome:
        """Sync *cloister* (its container runs when *running*: its branches may move).

        Raises :class:`SyncError` when the agent's work could not be read or taken in;
        the human's repository is then as it was. *ready* is called (holding the lock)
        just before the export container is made, once all that comes before it is
        done (the human's repository asked, the image found): ``cloister stop`` starts a
        sync while the engine kills the cloister and waits there until it is dead (what
        *ready* raises ends the sync, nothing of the human's changed).
        """
        started = time.monotonic()
        with self.lock(cloister):
            session = read_session(self.paths, cloister)
            if session is None or session.checkout is None or session.common_dir is None:
                raise SyncError(f"cloister {cloister!r} has no git directory to sync")
            human = HumanRepository.of(Path(session.checkout))
            outcome = SyncOutcome(cloister)
            try:
                self._sync(
                    session, human, outcome, running=running, assume_yes=assume_yes, ready=ready
                )
            except (GitError, ExportError, EngineError, OSError) as error:
                raise SyncError(f"cloister {cloister}: {error}") from None
        outcome.seconds = time.monotonic() - started
        return outcome

    def _sync(
        self,
        session: SessionRecord,
        human: HumanRepository,
        outcome: SyncOutcome,
        *,
        running: bool,
        assume_yes: bool,
        ready: Callable[[], None] | None,
    ) -> None:
        cloister = session.cloister
        git_dir = self.paths.cloister_git_dir(cloister)
        if not beneath.is_real_directory(git_dir.parent, git_dir.name):
            raise SyncError(f"cloister {cloister!r} has no git directory ({git_dir} is gone)")
        hash_length = 64 if human.object_format() == "sha256" else 40
        with self._scratch(cloister) as scratch:
            exported = self._export(cloister, git_dir, human, scratch, hash_length, ready=ready)
            outcome.head = exported.head
            outcome.notes += [
                f"the agent's branch {name} does not come back: its name has {why}"
                for name, why in sorted(exported.skipped.items())
            ]
            keep = self._take_pack(human, exported.pack) if exported.pack else None
            try:
                imported = _short_refs(human, agent_ref(cloister, ""))
                humans = _short_refs(human, "refs/heads/")
                shared = self._shared_branch(session, human)  # git asked once
                self._fast_forward(
                    session, human, exported, humans, outcome, shared=shared, assume_yes=assume_yes
                )
                plan = plan_sync(
                    agent=exported.refs,
                    human=humans,
                    imported=imported,
                    bases=session.bases,
                    agent_head=exported.head,
                    shared_checkout_branch=shared,
                )
                self._import(human, cloister, plan.imports, plan.removals)
                outcome.imported, outcome.removed = plan.imports, plan.removals
            finally:
                if keep is not None:
                    keep.unlink(missing_ok=True)
        bases = dict(plan.bases)
        mirrored = dict(session.host_heads)
        moved: set[str] = set()
        if running:
            moved, mirrored = self._to_cloister(
                session, exported.head, plan.to_cloister, humans, outcome
            )
        for branch, (_, old) in plan.to_cloister.items():
            if branch in moved:
                continue
            if old is None:  # not made in the cloister after all
                bases.pop(branch, None)
            else:  # where both agreed is unchanged
                bases[branch] = old
        self._note_divergence(session, exported, humans, outcome)
        update_session(
            self.paths,
            cloister,
            lambda record: record.model_copy(
                update={"bases": bases, "host_heads": mirrored, "synced_at": datetime.now(UTC)}
            ),
        )

    # -- 1. the export container -------------------------------------------------------------

    @contextlib.contextmanager
    def _scratch(self, cloister: str) -> Iterator[Path]:
        base = self.paths.git_dirs_dir
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        scratch = base / f".sync-{cloister}-{secrets.token_hex(4)}"
        scratch.mkdir(mode=0o700)
        try:
            (scratch / "in").mkdir(mode=0o700)
            (scratch / "out").mkdir(mode=0o700)
            yield scratch
        finally:
            beneath.remove_tree(scratch)

    def _export(
        self,
        cloister: str,
        git_dir: Path,
        human: HumanRepository,
        scratch: Path,
        hash_length: int,
        *,
        ready: Callable[[], None] | None,
    ) -> _Exported:
        if not self.engine.image_exists(stack.GIT_IMAGE):
            raise SyncError(
                f"the image {stack.GIT_IMAGE} is missing; `cloister guardian start` builds it"
            )
        given = scratch / "in"
        atomic_write(given / "object-format", human.object_format() + "\n", mode=0o644)
        atomic_write(given / "haves", "".join(f"{oid}\n" for oid in _haves(human, cloister)))
        binds = [
            Bind(str(git_dir), EXPORT_SOURCE),
            Bind(str(human.common / "objects"), ORIGIN_OBJECTS),
            Bind(str(given), "/in"),
            Bind(str(scratch / "out"), EXPORT_OUTPUT, read_only=False),
        ]
        extra = human.alternates()
        for number, path in enumerate(extra):
            binds.append(Bind(str(path), f"{ORIGIN_ALTERNATES}/{number}"))
        if extra:
            atomic_write(
                given / "alternates",
                "".join(f"{ORIGIN_ALTERNATES}/{number}\n" for number in range(len(extra))),
            )
        if ready is not None:
            ready()
        finished = self.engine.run(
            ContainerSpec(
                image=stack.GIT_IMAGE,
                name_prefix=self.instance.sync_prefix(cloister),
                user=self.uid_gid,
                binds=binds,
                labels={**self.instance.labels, stack.LABEL_SYNC: cloister},
            ),
            timeout=EXPORT_TIMEOUT,
        )
        if finished.exit_code != 0:
            last = " ".join(finished.log.strip().splitlines()[-3:]) or "no output"
            raise SyncError(
                f"the cloister's git directory could not be read (exit {finished.exit_code}):"
                f" {last[:400]}"
            )
        out = scratch / "out"
        refs_text = beneath.read_regular_bytes(out, "refs", MAX_LIST_BYTES)
        head_text = beneath.read_regular_bytes(out, "head", 4096)
        if refs_text is None or head_text is None:
            raise ExportError("the export wrote no ref list")
        if len(refs_text) >= MAX_LIST_BYTES:
            raise ExportError("the agent's ref list is too long")
        pack_info = beneath.lstat_below(out, "pack")
        if pack_info is not None and not stat.S_ISREG(pack_info.st_mode):
            raise ExportError("the export's pack is not a regular file")
        refs, skipped = parse_refs(refs_text, prefix="refs/agent/", hash_length=hash_length)
        return _Exported(
            refs=refs,
            skipped=skipped,
            head=parse_head(head_text, hash_length=hash_length),
            pack=out / "pack" if pack_info is not None else None,
        )

    # -- 2. the pack -------------------------------------------------------------------------

    def _take_pack(self, human: HumanRepository, pack: Path) -> Path | None:
        """Index the pack into the human's repository; the ``.keep`` that holds it until
        refs name its objects (a concurrent prune cannot take them).

        ``index-pack`` writes into a quarantine directory of the human's object store
        (as ``git receive-pack`` does), whose files join ``objects/pack`` only once it
        accepted the pack: one it refuses leaves no ``tmp_pack_*`` behind (a failing
        sync, repeated by the watch, would otherwise fill the human's disk).
        """
        objects = human.common / "objects"
        quarantine = objects / f"cloister-incoming-{secrets.token_hex(6)}"
        (quarantine / "pack").mkdir(parents=True, mode=0o700)
        try:
            try:
                fd = beneath.open_regular(pack)
            except beneath.NotRegularError:
                raise ExportError("the export's pack is not a regular file") from None
            try:
                os.set_blocking(fd, True)
                output = run_git(
                    f"--git-dir={human.common}",
                    "index-pack",
                    "--stdin",
                    "--strict",
                    "--keep=cloister sync",
                    stdin=fd,
                    timeout=EXPORT_TIMEOUT,
                    env={
                        "GIT_OBJECT_DIRECTORY": str(quarantine),
                        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(objects),
                    },
                ).stdout
            finally:
                os.close(fd)
            # The .keep first, the .idx last (git's own order: a pack is found by its
            # index, and nothing may prune it before refs name its objects).
            order = {".keep": 0, ".pack": 1, ".rev": 2, ".idx": 3}
            made = sorted(
                (quarantine / "pack").iterdir(), key=lambda path: order.get(path.suffix, 4)
            )
            for file in made:
                file.replace(objects / "pack" / file.name)
        finally:
            beneath.remove_tree(quarantine)
        kind, _, name = output.strip().partition("\t")
        if kind == "keep" and name:
            return objects / "pack" / f"pack-{name}.keep"
        return None

    # -- 3. refs/cloister/<cloister>/ ----------------------------------------------------------

    @staticmethod
    def _import(
        human: HumanRepository, cloister: str, imports: Mapping[str, str], removals: Sequence[str]
    ) -> None:
        # Deletions first, on their own: `a` going and `a/b` coming cannot share a
        # transaction.
        if removals:
            human.git(
                "update-ref",
                "--stdin",
                input="".join(f"delete {agent_ref(cloister, branch)}\n" for branch in removals),
            )
        if imports:
            human.git(
                "update-ref",
                "-m",
                f"cloister sync {cloister}",
                "--stdin",
                input="".join(
                    f"update {agent_ref(cloister, branch)} {oid}\n"
                    for branch, oid in sorted(imports.items())
                ),
            )

    # -- 4. the fast-forward ---------------------------------------------------------------------

    @staticmethod
    def _shared_branch(session: SessionRecord, human: HumanRepository) -> str | None:
        """The branch checked out where the cloister works, when that is the human's checkout."""
        if not session.shared:
            return None
        result = run_git("-C", str(human.checkout), "symbolic-ref", "--quiet", "HEAD", check=False)
        name = result.stdout.strip()
        return name.removeprefix("refs/heads/") if name.startswith("refs/heads/") else None

    def _fast_forward(
        self,
        session: SessionRecord,
        human: HumanRepository,
        exported: _Exported,
        humans: dict[str, str],
        outcome: SyncOutcome,
        *,
        shared: str | None,  # the branch checked out where it works (_shared_branch)
        assume_yes: bool,
    ) -> None:
        branch = shared if session.shared else session.branch
        if branch is None or not self.fast_forward:
            return
        if session.shared and exported.head.branch != branch:
            return  # the agent works on another branch than the one checked out here
        new = exported.refs.get(branch)
        old = humans.get(branch)
        if new is None or new == old or old != session.bases.get(branch):
            return  # nothing new, or the human moved it: they merge
        if old is not None and not human.is_ancestor(old, new):
            return  # the agent rewrote it: not a fast-forward
        elsewhere = human.checked_out().get(branch)
        if not session.shared and elsewhere is not None:
            outcome.notes.append(
                f"your {branch} is checked out in {elsewhere}: not fast-forwarded; merge"
                f" {agent_ref(session.cloister, branch)} there"
            )
            return
        hazards = _hazards(human, old, new, session.protected)
        if hazards and not assume_yes:
            outcome.notes.append(
                f"your {branch} was not fast-forwarded: the agent's commits {'; '.join(hazards)}."
                f" Look at them (git log -p {branch}..{agent_ref(session.cloister, branch)});"
                f" `cloister sync {session.cloister} --yes` fast-forwards anyway"
            )
            return
        try:
            if session.shared:
                done = self._fast_forward_checkout(human, branch, old, new, outcome)
            else:
                done = self._update_branch(human, branch, old, new, outcome)
        except GitError as error:
            outcome.notes.append(f"your {branch} was not fast-forwarded: {error}")
            return
        if done:
            humans[branch] = new
            outcome.fast_forwarded = (branch, old, new)

    @staticmethod
    def _update_branch(
        human: HumanRepository, branch: str, old: str | None, new: str, outcome: SyncOutcome
    ) -> bool:
        expected = old or "0" * len(new)
        result = run_git(
            f"--git-dir={human.common}",
            "update-ref",
            "-m",
            "cloister sync: fast-forward to the agent's work",
            f"refs/heads/{branch}",
            new,
            expected,
            check=False,
        )
        if result.returncode != 0:
            outcome.notes.append(f"your {branch} moved meanwhile: not fast-forwarded")
        return result.returncode == 0

    def _fast_forward_checkout(
        self, human: HumanRepository, branch: str, old: str | None, new: str, outcome: SyncOutcome
    ) -> bool:
        """Move the checked-out *branch* and the index along, under git's index lock.

        The work tree is the one the agent wrote, so it already holds the new files;
        the index becomes the new commit's tree (stat data kept where the content is the
        same). Refused when anything is staged: that is the human's work in progress.
        """
        git_dir = human.git_dir
        index = git_dir / "index"
        lock = git_dir / "index.lock"
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            outcome.notes.append(
                f"your git is busy in {human.checkout} (index.lock exists): {branch} was not"
                " fast-forwarded; `cloister sync` again"
            )
            return False
        os.close(fd)
        scratch = git_dir / f"cloister-index-{secrets.token_hex(4)}"
        try:
            if not self._nothing_staged(human, old, index):
                outcome.notes.append(
                    f"your {branch} was not fast-forwarded: you have staged changes in"
                    f" {human.checkout}"
                )
                return False
            if index.exists():
                scratch.write_bytes(index.read_bytes())
            # One tree, --reset: the index becomes *new*'s, with the stat data of the
            # entries whose content is the same (the work tree is not looked at).
            env = {"GIT_INDEX_FILE": str(scratch)}
            run_git("-C", str(human.checkout), "read-tree", "--reset", new, env=env)
            if not self._update_branch(human, branch, old, new, outcome):
                return False
            scratch.replace(index)
            return True
        finally:
            scratch.unlink(missing_ok=True)
            lock.unlink(missing_ok=True)

    @staticmethod
    def _nothing_staged(human: HumanRepository, old: str | None, index: Path) -> bool:
        if old is None:  # an unborn branch: anything in the index is staged
            listed = run_git("-C", str(human.checkout), "ls-files", "--stage", env=None)
            return not index.exists() or not listed.stdout.strip()
        # git reads an index whose lock is held (by us) as it is.
        code = run_git(
            "-C",
            str(human.checkout),
            "diff-index",
            "--cached",
            "--quiet",
            "--no-ext-diff",
            old,
            "--",
            check=False,
        ).returncode
        return code == 0

    # -- 5. the cloister's side --------------------------------------------------------------------

    def _to_cloister(
        self,
        session: SessionRecord,
        head: Head,
        moves: Mapping[str, tuple[str, str | None]],
        humans: Mapping[str, str],
        outcome: SyncOutcome,
    ) -> tuple[set[str], dict[str, str]]:
        """Move the cloister's branches and mirror the human's, from inside it; which
        branches moved, and the mirror as it now is there."""
        container = self.instance.cloister(session.cloister)
        mirrored = dict(session.host_heads)
        moved: set[str] = set()
        if humans != mirrored:
            lines = [
                f"update refs/remotes/{HOST_REMOTE}/{branch} {oid}\n"
                for branch, oid in sorted(humans.items())
            ]
            lines += [
                f"delete refs/remotes/{HOST_REMOTE}/{branch}\n"
                for branch in sorted(mirrored.keys() - humans.keys())
            ]
            if self._update_inside(container, "".join(lines)) == 0:
                mirrored = dict(humans)
        if not moves:
            return moved, mirrored
        transaction: list[str] = []
        for branch, (new, old) in sorted(moves.items()):
            if old is None:
                transaction.append(f"create refs/heads/{branch} {new}\n")
            else:
                transaction.append(f"update refs/heads/{branch} {new} {old}\n")
        checked_out = head.branch
        if checked_out is not None and checked_out in moves and moves[checked_out][1] is not None:
            new, old = moves[checked_out]
            # Its index comes along (what the agent staged stays staged), or the branch
            # stays where it is. (plan_sync moves it only where the work tree is shared.)
            code = self._exec(container, ["git", "read-tree", "-m", str(old), new])
            if code != 0:
                outcome.notes.append(
                    f"the cloister's {checked_out} stays: what the agent staged conflicts with"
                    f" your commits (they are {HOST_REMOTE}/{checked_out} in it)"
                )
                transaction = [
                    line for line in transaction if f" refs/heads/{checked_out} " not in line
                ]
        if transaction and self._update_inside(container, "".join(transaction)) == 0:
            for branch, (new, _) in moves.items():
                if any(f" refs/heads/{branch} " in line for line in transaction):
                    moved.add(branch)
                    outcome.to_cloister[branch] = new
        elif transaction:
            outcome.notes.append("the cloister's branches moved meanwhile: not updated (next sync)")
        return moved, mirrored

    def _update_inside(self, container: str, transaction: str) -> int | None:
        # The transaction is an argument, never part of the script.
        script = 'printf "%s" "$1" | git update-ref --stdin'
        return self._exec(container, ["sh", "-c", script, "cloister-sync", transaction])

    def _exec(self, container: str, argv: list[str]) -> int | None:
        try:
            return self.engine.exec(container, argv, timeout=EXEC_TIMEOUT)
        except EngineError:
            return None  # gone, or not running: its branches move at the next sync

    @staticmethod
    def _note_divergence(
        session: SessionRecord,
        exported: _Exported,
        humans: Mapping[str, str],
        outcome: SyncOutcome,
    ) -> None:
        """How to merge the agent's work on its branch when it was not fast-forwarded."""
        branch = exported.head.branch if session.shared else session.branch
        if branch is None or outcome.fast_forwarded is not None:
            return
        ours = exported.refs.get(branch)
        if ours is None or ours in (humans.get(branch), session.bases.get(branch)):
            return  # nothing of the agent's that the human lacks
        if any(f" {branch} " in f" {note} " for note in outcome.notes):
            return
        ref = agent_ref(session.cloister, branch)
        outcome.notes.append(f"the agent's {branch} is {ref}; to take it: git merge {ref}")

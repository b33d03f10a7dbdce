"""A cold ingest through Anthropic's Message Batches API (``SITUATE_LLM_BATCH=1``).

A run's blurbs step goes over its documents twice.  The first pass builds every request exactly
as a live ingest would (the same prompts, windows and blurb-cache look-ups; a chunk already in the
blurb cache, kept from an earlier version or given by a blurb file asks nothing) and gathers them
with :meth:`MessageBatchRound.call` instead of sending them; :meth:`MessageBatchRound.submit_and_wait`
sends them as Message Batches (at most :data:`MAX_REQUESTS` requests and :data:`MAX_BATCH_BYTES` of
request bodies each), polls until they end and keeps each answer by its request.  The second pass
is the ordinary step with :meth:`MessageBatchRound.call` answering from the batch: each answer is
cleaned, grounded, cached and written as if the model had answered it live, with the usage the
batch reported.  A request the batch did not answer (errored, expired, canceled, or still in
progress when the run stopped waiting) fails its document with :class:`BatchMissing`, naming the
batch and why; the blurbs it did answer are in the blurb cache, so the next run sends only the
rest.

Batches cost half the price of live requests (anthropic.com/pricing, "Batch processing"); prompt
caching inside a batch is best-effort, so the hits are what the results report.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time

from situate.resources.errors import (
    BatchGone,
    BatchMissing,  # noqa: F401  (importable from here as before)
)
from situate.resources.models.server import ServerError

#: A Message Batch holds at most 100,000 requests and 256 MB (Anthropic's Message Batches docs,
#: "Batch limitations"); 200 MB of request bodies leaves room for the envelope.
MAX_REQUESTS = 100_000
MAX_BATCH_BYTES = 200 * 1024 * 1024


class BatchCache:
    """The blurb cache as a round sees it: read as it is; written only with an answer the batch
    gave (never the gathering pass's placeholders, nor a request the batch did not answer)."""

    def __init__(self, inner, round_: MessageBatchRound):
        self.inner, self.round = inner, round_

    def get(self, key: str):
        return self.inner.get(key)

    def put(self, key: str, entry: dict) -> None:
        if not self.round.gathering and not self.round.last_missing:
            self.inner.put(key, entry)


@dataclasses.dataclass
class MessageBatchRound:
    """One run's Message Batches: gather, submit, wait, answer.

    Parameters
    ----------
    client : situate.resources.models.anthropic_api.MessagesClient
        The checked API client (its SDK client sends the batches).
    poll_s : float
        Seconds between two looks at a batch in progress (``SITUATE_LLM_BATCH_POLL``).
    wait_s : float
        Seconds the run waits for its batches in all (``SITUATE_LLM_BATCH_WAIT``); a batch still
        in progress then is left (its chunks fail their documents, to the next run).
    """

    client: object
    poll_s: float = 30.0
    wait_s: float = 86_400.0
    gathering: bool = True
    requests: dict = dataclasses.field(default_factory=dict)
    answers: dict = dataclasses.field(default_factory=dict)
    failures: dict = dataclasses.field(default_factory=dict)
    batches: list = dataclasses.field(default_factory=list)
    #: answering: why each request of the current document the batch did not answer
    missing: list = dataclasses.field(default_factory=list)
    last_missing: bool = False
    #: the batches dropped from the ledger, each with why
    forgotten: dict = dataclasses.field(default_factory=dict)
    #: the batch each request went in (resumed or sent by this run)
    _where: dict = dataclasses.field(default_factory=dict)

    def _request(self, tokens: list[int], stop: list[str], max_tokens: int) -> tuple[str, dict]:
        from situate.resources.models.anthropic_api import ChatTokenizer

        system, blocks, answer = ChatTokenizer().split(tokens)
        params = self.client.params(system, blocks, answer, max_tokens, stop)
        cid = hashlib.sha256(json.dumps([params, stop], sort_keys=True).encode()).hexdigest()
        return cid, params

    def call(self, tokens: list[int], stop: list[str], max_tokens: int):
        """The blurb model's ``generate`` for this round.  Gathering: the request is kept and an
        empty placeholder answered (never cached: :class:`BatchCache`).  Answering: the batch's
        answer to the same request, with its usage; a request it did not answer gets an empty
        placeholder too, never cached, and its reason joins ``missing``: the caller fails the
        document (:meth:`check_document`) once the rest of its answers are cached, so the next
        run sends only what is missing.
        """
        from situate.resources.models.llm import Generation

        cid, params = self._request(tokens, stop, max_tokens)
        if self.gathering:
            self.requests[cid] = (params, list(stop))
            return Generation("", 0, 0, 0, 0, 0.0)
        c = self.answers.get(cid)
        self.last_missing = c is None
        if c is None:
            self.missing.append(self.failures.get(cid, "it was not in this run's batches"))
            return Generation("", 0, 0, 0, 0, 0.0)
        reused = c.cached_tokens or 0
        return Generation(
            c.text, c.prompt_tokens, c.prompt_tokens - reused, reused, c.generated, 0.0, written=c.written
        )

    def start_document(self) -> None:
        """Forget the previous document's missing answers."""
        self.missing, self.last_missing = [], False

    def check_document(self) -> None:
        """Raise when the document just answered had a request the batch did not answer.

        Raises
        ------
        BatchMissing
            Naming how many and the first reason.
        """
        if not self.gathering and self.missing:
            raise BatchMissing(
                f"{len(self.missing)} chunk(s) not answered by the Message Batch ({self.missing[0]}): "
                "the document is left to the next run, which sends only what is still missing"
            )

    def _groups(self, cids: list[str]) -> list[list[str]]:
        groups, cur, size = [], [], 0
        for cid in cids:
            n = len(json.dumps(self.requests[cid][0]))
            if cur and (len(cur) >= MAX_REQUESTS or size + n > MAX_BATCH_BYTES):
                groups.append(cur)
                cur, size = [], 0
            cur.append(cid)
            size += n
        return groups + ([cur] if cur else [])

    def _drop_unknown(self, api, pending: list, used: list, known: dict, ledger, log) -> None:
        """Forget each resumed batch the API no longer knows (404), so its requests are sent now."""
        import anthropic

        for bid in list(pending):
            try:
                api.retrieve(bid)
            except anthropic.NotFoundError:
                self._forget(bid, self._unknown(bid), pending, known, ledger, log)
                used.remove(bid)
                if log:
                    log(f"Message Batch {bid}: its request(s) of this run are sent again")

    def submit_and_wait(self, log=None, sleep=time.sleep, ledger=None) -> dict:
        """Send the gathered requests, wait for the batches to end, keep their answers; then
        :meth:`call` answers from them.  Never raises: an API error (after the SDK's retries)
        becomes the reason of every request it left unanswered, so each document fails with it
        and the others' answers are kept.

        A batch of the ledger the API does not know (404: deleted, or sent with another
        workspace's key) is forgotten and its requests sent again in this run; a batch whose
        results cannot be collected (unknown to the API, its ``results_url`` on another origin
        than ``SITUATE_LLM_URL``, results that are not JSON lines or over the HTTP client's
        bounds) is forgotten too, its requests left to the next run, which sends them again.  A
        batch that could not be read for a passing reason (a timeout, a dropped connection, a 5xx
        after the retries) stays in the ledger: the next run collects it.

        Parameters
        ----------
        log : callable, optional
            Called with a progress line per batch sent and per look.
        sleep : callable
            ``time.sleep`` (tests give another).
        ledger : object, optional
            Where the batches still in progress are remembered between runs (``read() -> dict``
            and ``write(dict)``: batch id to its custom ids): a run that stops waiting leaves its
            batches there, and the next run collects their answers instead of sending those
            requests again.

        Returns
        -------
        dict
            ``{"batches", "requests", "succeeded", "errored", "expired", "canceled", "other",
            "not_ended", "forgotten", "error", "seconds"}`` for the run's metadata
            (``forgotten``: the batches dropped from the ledger, each with why).
        """
        import anthropic

        t0 = time.perf_counter()
        self.gathering = False
        api = self.client.client.messages.batches
        known = (ledger.read() if ledger is not None else {}) or {}
        pending = [bid for bid, cids in known.items() if isinstance(cids, list) and set(cids) & set(self.requests)]
        used = list(pending)  # this run's batches: those resumed from the ledger, then those sent
        for bid in pending:
            self._where.update({cid: bid for cid in known[bid] if cid in self.requests})
        error = ""
        try:
            self._drop_unknown(api, pending, used, known, ledger, log)
            waiting_for = {cid for bid in pending for cid in known[bid]}
            for group in self._groups([cid for cid in self.requests if cid not in waiting_for]):
                b = api.create(requests=[{"custom_id": cid, "params": self.requests[cid][0]} for cid in group])
                pending.append(b.id)
                used.append(b.id)
                known[b.id] = group
                self._where.update(dict.fromkeys(group, b.id))
                if ledger is not None:
                    ledger.write(known)
                if log:
                    log(f"Message Batch {b.id}: {len(group)} request(s) sent")
            while pending:
                for bid in list(pending):
                    try:
                        ended = self._look(api, bid)
                    except BatchGone as e:
                        self._forget(bid, str(e), pending, known, ledger, log)
                        continue
                    if ended:
                        pending.remove(bid)
                        known.pop(bid, None)
                        if ledger is not None:
                            ledger.write(known)
                left = self.wait_s - (time.perf_counter() - t0)
                if not pending or left <= 0:
                    break
                if log:
                    log(
                        f"Message Batches in progress: {', '.join(pending)}; next look in "
                        f"{min(self.poll_s, left):.0f} s"
                    )
                sleep(min(self.poll_s, left))
        except (anthropic.AnthropicError, ServerError, ValueError, TypeError, AttributeError) as e:
            error = str(
                self.client._error(e, "a Message Batch")
                if isinstance(e, (anthropic.AnthropicError, ServerError))
                else ServerError(f"a Message Batch: {type(e).__name__}: the API's answer is not a batch's")
            )
            if log:
                log(f"Message Batches stopped: {error}")
        self._mark_unanswered(pending, error)
        self.batches = used
        return self._summary(used, pending, error, time.perf_counter() - t0)

    def _unknown(self, bid: str) -> str:
        from situate.resources.models.anthropic_api import _safe_url

        return (
            f"batch {bid} is unknown to {_safe_url(self.client.url)} (404: deleted, or sent with another "
            "workspace's ANTHROPIC_API_KEY)"
        )

    def _forget(self, bid: str, why: str, pending: list[str], known: dict, ledger, log) -> None:
        """Drop batch ``bid`` from the round and the ledger, with why (its unanswered requests
        are sent again: in this run when it was resumed and found unknown, else by the next)."""
        if bid in pending:
            pending.remove(bid)
        known.pop(bid, None)
        self.forgotten[bid] = why
        if ledger is not None:
            ledger.write(known)
        if log:
            log(f"Message Batch {bid} forgotten ({LEDGER}): {why}")

    def _look(self, api, bid: str) -> bool:
        """Whether batch ``bid`` has ended; if so its results are collected (:meth:`_collect`).

        Raises
        ------
        BatchGone
            The batch cannot be collected: unknown to the API, its results on another origin
            than ``SITUATE_LLM_URL`` (not asked: the key is not sent there) or unreadable.
        """
        import anthropic

        try:
            b = api.retrieve(bid)
            if b.processing_status != "ended":
                return False
            url = getattr(b, "results_url", None)
            if url is not None and not self.client.same_origin(url):
                from situate.resources.models.anthropic_api import _safe_url

                try:
                    where = _safe_url(url) if isinstance(url, str) else f"a {type(url).__name__}, not a URL"
                except ValueError:  # a port that is not a number
                    where = "a URL that is not one"
                raise BatchGone(
                    f"batch {bid} names its results on {where}, another origin than SITUATE_LLM_URL "
                    f"({_safe_url(self.client.url)}): not fetched, ANTHROPIC_API_KEY not sent there"
                )
            self._collect(api, bid)
            return True
        except anthropic.NotFoundError:
            raise BatchGone(self._unknown(bid)) from None

    def _mark_unanswered(self, pending: list[str], error: str) -> None:
        """Give each request with no answer its reason: the API error that stopped the round (or
        "not sent"), that its batch is still in progress or was not collected (the next run
        collects it), that its batch was forgotten (the next run sends it again), or that its
        batch ended without a result for it."""
        for cid in self.requests:
            if cid in self.answers or cid in self.failures:
                continue
            bid = self._where.get(cid)
            if bid is None:
                why = error or "not sent"
            elif bid in self.forgotten:
                why = f"{self.forgotten[bid]}: forgotten, the next run sends this request again"
            elif bid in pending and error:
                why = f"batch {bid} not collected ({error}): the next run collects its answers"
            elif bid in pending:
                why = f"batch {bid} still in progress after SITUATE_LLM_BATCH_WAIT: the next run collects its answers"
            else:
                why = f"batch {bid} ended without a result for this request"
            self.failures[cid] = why

    def _summary(self, used: list[str], pending: list[str], error: str, seconds: float) -> dict:
        """The round's figures for the run's metadata (:meth:`submit_and_wait`'s return)."""
        kinds = [why.split(" ", 1)[0] for why in self.failures.values()]
        return {
            "batches": list(used),
            "requests": len(self.requests),
            "succeeded": len(self.answers),
            **{k: kinds.count(k) for k in ("errored", "expired", "canceled")},
            "other": sum(k not in ("errored", "expired", "canceled", "batch") for k in kinds),
            "not_ended": len(pending),
            "forgotten": dict(self.forgotten),
            "error": error,
            "seconds": round(seconds, 1),
        }

    def _collect(self, api, bid: str) -> None:
        """Keep batch ``bid``'s answers to this run's requests (the first result of a custom id; a
        result that is not a Messages API answer fails its request alone, a line whose custom id
        is not a string is skipped alone), and count what was billed: every succeeded result of
        the batch, answers to requests this run no longer asks included
        (:func:`situate.resources.models.llm.count_api_usage`), once: when the results were read
        to their end, or the batch is forgotten (never to be read again).

        Raises
        ------
        BatchGone
            The results cannot be read (unknown to the API, refused by the HTTP client, not JSON
            lines of results): the batch is forgotten; the answers read before are kept.
        situate.resources.models.server.ServerError
            A passing failure (a timeout, a dropped connection): the batch stays in the ledger and
            nothing of it is counted (the next run reads and counts it all).
        anthropic.AnthropicError
            Another API error, passing as well (its retries spent).
        """
        import anthropic
        import httpx2

        from situate.resources.models.anthropic_api import AnswerRefused

        billed: list[tuple[int, int, int, int]] = []
        seen: set[str] = set()
        gone = ""
        try:
            results = api.results(bid)
            try:
                for entry in results:
                    try:
                        self._take(entry, bid, seen, billed)
                    except (ValueError, TypeError, AttributeError):  # a line that is not a result: skipped
                        continue
            finally:
                close = getattr(results, "close", None)
                if callable(close):
                    close()
        except anthropic.NotFoundError:
            gone = self._unknown(bid)
        except AnswerRefused as e:
            gone = f"batch {bid}: {e}"
        except httpx2.TimeoutException:
            raise ServerError(
                f"the results of batch {bid} took longer than SITUATE_LLM_TIMEOUT to read (raise it for a large batch)"
            ) from None
        except httpx2.HTTPError as e:
            raise ServerError(f"the results of batch {bid}: the connection broke ({type(e).__name__})") from None
        except (ValueError, TypeError, AttributeError, RecursionError) as e:
            gone = f"batch {bid}'s results are not JSON lines of results ({type(e).__name__})"
        self._bill(billed)
        if gone:
            raise BatchGone(gone)

    def _take(self, entry, bid: str, seen: set, billed: list) -> None:
        """One line of batch ``bid``'s results: its usage joins ``billed`` (a succeeded answer);
        its answer or failure is kept when it answers a request of this run not answered yet."""
        cid = getattr(entry, "custom_id", None)
        if not isinstance(cid, str) or cid in seen:
            return  # not a custom id (a malformed line, skipped alone), or this batch's result for it seen already
        seen.add(cid)
        result = getattr(entry, "result", None)
        kind = getattr(result, "type", None)
        if kind == "succeeded":
            try:
                billed.append(self.client.usage_of(result.message))
            except (ServerError, AttributeError):
                pass  # no usage in it to count
        if cid not in self.requests or cid in self.answers or cid in self.failures:
            return  # not asked by this run (e.g. a document edited since it was sent), or answered already
        if kind == "succeeded":
            try:
                self.answers[cid] = self.client.completion_of(result.message, self.requests[cid][1], 0.0)
            except ServerError as e:
                self.failures[cid] = f"errored in batch {bid}: {e}"
        elif kind == "errored":
            err = getattr(getattr(result, "error", None), "error", None)
            self.failures[cid] = f"errored in batch {bid}: {str(getattr(err, 'type', 'error'))[:80]}"
        elif kind in ("expired", "canceled"):
            self.failures[cid] = f"{kind} in batch {bid}"
        else:
            self.failures[cid] = f"unknown result {str(kind)[:40]!r} in batch {bid}"

    @staticmethod
    def _bill(billed: list[tuple[int, int, int, int]]) -> None:
        from situate.resources.models.llm import count_api_usage

        for prompt, generated, read, written in billed:
            count_api_usage(prompt - read, written, read, generated, batch=True)


#: Where a data folder remembers its Message Batches still in progress (relative to the folder).
LEDGER = "cache/message-batches.json"
#: Most batches and custom ids the ledger holds (a file from the data folder is untrusted input).
MAX_LEDGER_BATCHES, MAX_LEDGER_IDS = 1_000, 1_000_000


class BatchLedger:
    """The batches a data folder's runs sent and have not collected (``cache/message-batches.json``
    through ``store.read_file`` / ``store.write_file``: local or on an object store).  A file that
    is unreadable, too large or not ``{batch id: [custom id, ...]}`` is ignored (its batches are
    then sent again, never trusted)."""

    def __init__(self, store):
        self.store = store

    def read(self) -> dict:
        raw = self.store.read_file(LEDGER)
        if not raw or len(raw) > 80 * MAX_LEDGER_IDS:
            return {}
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            return {}
        if not isinstance(data, dict) or len(data) > MAX_LEDGER_BATCHES:
            return {}
        ok = {}
        for bid, cids in data.items():
            if (
                isinstance(bid, str)
                and re.fullmatch(r"[A-Za-z0-9_-]{1,100}", bid)
                and isinstance(cids, list)
                and all(isinstance(c, str) and re.fullmatch(r"[0-9a-f]{64}", c) for c in cids)
            ):
                ok[bid] = cids
        return ok

    def write(self, batches: dict) -> None:
        self.store.write_file(LEDGER, json.dumps(batches).encode())

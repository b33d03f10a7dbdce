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
import time

from resources.models.server import ServerError

#: A Message Batch holds at most 100,000 requests and 256 MB (Anthropic's Message Batches docs,
#: "Batch limitations"); 200 MB of request bodies leaves room for the envelope.
MAX_REQUESTS = 100_000
MAX_BATCH_BYTES = 200 * 1024 * 1024


class BatchMissing(ServerError):
    """A request the Message Batch did not answer; its document is left to the next run."""


class BatchCache:
    """The blurb cache as a round sees it: read as it is; written only with an answer the batch
    gave (never the gathering pass's placeholders, nor a request the batch did not answer)."""

    def __init__(self, inner, round_: "MessageBatchRound"):
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
    client : resources.models.anthropic_api.MessagesClient
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

    def _request(self, tokens: list[int], stop: list[str], max_tokens: int) -> tuple[str, dict]:
        from resources.models.anthropic_api import ChatTokenizer

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
        from resources.models.llm import Generation

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
        return Generation(c.text, c.prompt_tokens, c.prompt_tokens - reused, reused, c.generated, 0.0,
                          written=c.written)

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
            raise BatchMissing(f"{len(self.missing)} chunk(s) not answered by the Message Batch ({self.missing[0]}): "
                               "the document is left to the next run, which sends only what is still missing")

    def _groups(self) -> list[list[str]]:
        groups, cur, size = [], [], 0
        for cid, (params, _) in self.requests.items():
            n = len(json.dumps(params))
            if cur and (len(cur) >= MAX_REQUESTS or size + n > MAX_BATCH_BYTES):
                groups.append(cur)
                cur, size = [], 0
            cur.append(cid)
            size += n
        return groups + ([cur] if cur else [])

    def submit_and_wait(self, log=None, sleep=time.sleep) -> dict:
        """Send the gathered requests, wait for the batches to end, keep their answers; then
        :meth:`call` answers from them.

        Returns
        -------
        dict
            ``{"batches", "requests", "succeeded", "errored", "expired", "canceled",
            "not_ended", "seconds"}`` for the run's metadata.

        Raises
        ------
        resources.models.server.ServerError
            A batch could not be created or read (as the live client's errors, naming the setting).
        """
        import anthropic

        t0 = time.perf_counter()
        self.gathering = False
        api = self.client.client.messages.batches
        ids = []
        try:
            for group in self._groups():
                b = api.create(requests=[{"custom_id": cid, "params": self.requests[cid][0]} for cid in group])
                ids.append(b.id)
                if log:
                    log(f"Message Batch {b.id}: {len(group)} request(s) sent")
            pending = list(ids)
            while pending:
                for bid in list(pending):
                    if api.retrieve(bid).processing_status == "ended":
                        pending.remove(bid)
                        self._collect(api, bid)
                if pending:
                    if time.perf_counter() - t0 > self.wait_s:
                        break
                    if log:
                        log(f"Message Batches in progress: {', '.join(pending)}; next look in {self.poll_s:.0f} s")
                    sleep(self.poll_s)
        except anthropic.AnthropicError as e:
            raise self.client._error(e, "a Message Batch") from None
        for bid in pending:
            for cid in self.requests:
                if cid not in self.answers:
                    self.failures.setdefault(cid, f"batch {bid} still in progress after SITUATE_LLM_BATCH_WAIT")
        self.batches = ids
        counts = {k: sum(why.startswith(k) for why in self.failures.values())
                  for k in ("errored", "expired", "canceled")}
        return {"batches": ids, "requests": len(self.requests), "succeeded": len(self.answers), **counts,
                "not_ended": len(pending), "seconds": round(time.perf_counter() - t0, 1)}

    def _collect(self, api, bid: str) -> None:
        for entry in api.results(bid):
            cid = getattr(entry, "custom_id", None)
            if cid not in self.requests:
                continue  # not one of ours: ignored
            result = entry.result
            if result.type == "succeeded":
                try:
                    self.answers[cid] = self.client.completion_of(result.message, self.requests[cid][1], 0.0)
                except ServerError as e:
                    self.failures[cid] = f"errored: {e}"
            elif result.type == "errored":
                err = getattr(getattr(result, "error", None), "error", None)
                self.failures[cid] = f"errored in batch {bid}: {getattr(err, 'type', 'error')}"
            else:
                self.failures[cid] = f"{result.type} in batch {bid}"

"""A request's turn on the parallel llama.cpp engine (``EngineHost.parallel``), in the shape of a ``Turn``: what it
asks runs side by side with the other requests on the same model, in the slot the engine gives it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.errors import InvalidInputError
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from app.services.engines.host import LoadedModel, Turn
from app.services.engines.parallel_slots import ParallelUse

NO_EMBEDDINGS = "The parallel llama.cpp engine does not embed text; embeddings run on the single worker."


@dataclass(frozen=True)
class ParallelTurn(Turn):
    use: ParallelUse | None = None
    client: str | None = None  # who asked: shown with the slot (``ParallelSnapshot``)
    label: str | None = None  # the request's label in the request log

    @property
    def loaded(self) -> LoadedModel:
        load = self._load()
        return LoadedModel(load.entry, load.info, load.params)

    # The replies are the parallel engine's (``ParallelReply``: a ReplyHandle, not the host's ReplyStream).
    def stream_chat(
        self, messages: list[dict[str, Any]], sampling: SamplingParams, options: GenerationOptions | None = None
    ) -> Any:
        return self.host.parallel.stream_chat(messages, sampling, options, client=self.client, label=self.label)

    def complete(self, prompt: str, sampling: SamplingParams, options: GenerationOptions | None = None) -> Any:
        return self.host.parallel.complete(prompt, sampling, options, client=self.client, label=self.label)

    async def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
        return await self.host.parallel.count_tokens(messages, tools)

    async def embed_counted(self, texts: list[str]) -> tuple[list[list[float]], int]:
        raise InvalidInputError(NO_EMBEDDINGS)

    async def reload(self, params: LoadParams) -> Any:
        raise InvalidInputError("The parallel llama.cpp engine keeps the context it was loaded with.")

    def _load(self) -> Any:
        assert self.use is not None
        return self.use.load

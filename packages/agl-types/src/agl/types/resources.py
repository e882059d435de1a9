"""Tunable resources handed to agents: LLM endpoints and prompt templates, published as versioned snapshots."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, cast

from pydantic import BaseModel, Field

from .extras import requires_extra

if TYPE_CHECKING:
    from .rollouts import AttemptedRollout

__all__ = ["LLM", "NamedResources", "PromptTemplate", "ProxyLLM", "ResourceUnion", "ResourcesUpdate"]


class LLM(BaseModel):
    """An OpenAI-compatible endpoint and the model to ask for."""

    resource_type: Literal["llm"] = "llm"
    endpoint: str
    model: str
    api_key: str | None = None
    sampling_parameters: dict[str, Any] = Field(default_factory=dict)

    def get_base_url(self, *args: Any, **kwargs: Any) -> str:
        """The base URL to give an OpenAI client."""
        return self.endpoint


class ProxyLLM(LLM):
    """An LLM behind the agl LLM proxy: calls are attributed to a rollout and attempt through the URL."""

    resource_type: Literal["proxy_llm"] = "proxy_llm"  # pyright: ignore[reportIncompatibleVariableOverride]

    def get_base_url(self, rollout_id: str | None = None, attempt_id: str | None = None) -> str:
        """The proxy URL routed to one attempt: ``http://h:p/v1`` becomes ``http://h:p/rollout/R/attempt/A/v1``.

        With neither id, the raw endpoint. With only one of them, ``ValueError``.
        """
        if rollout_id is None and attempt_id is None:
            return self.endpoint
        if (
            not isinstance(rollout_id, str)
            or not isinstance(attempt_id, str)
            or not rollout_id
            or not attempt_id
        ):
            raise ValueError(
                "ProxyLLM.get_base_url needs both rollout_id and attempt_id as non-empty strings "
                f"(got rollout_id={rollout_id!r}, attempt_id={attempt_id!r})"
            )
        base = self.endpoint.removesuffix("/")
        has_v1 = base.endswith("/v1")
        base = base.removesuffix("/v1")
        routed = f"{base}/rollout/{rollout_id}/attempt/{attempt_id}"
        return routed + "/v1" if has_v1 else routed

    def with_attempted_rollout(self, rollout: AttemptedRollout) -> LLM:
        """A plain :class:`LLM` whose endpoint is routed to ``rollout``'s current attempt."""
        return LLM(
            endpoint=self.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            model=self.model,
            api_key=self.api_key,
            sampling_parameters=dict(self.sampling_parameters),
        )


class PromptTemplate(BaseModel):
    """A prompt with placeholders, rendered by one of three engines."""

    resource_type: Literal["prompt_template"] = "prompt_template"
    template: str
    engine: Literal["f-string", "jinja", "poml"] = "f-string"

    def format(self, /, **context: Any) -> str:
        """Render the template with ``context``.

        ``f-string`` uses :meth:`str.format`; ``jinja`` needs ``jinja2`` (extra ``jinja``); ``poml``
        needs ``poml`` (extra ``poml``) and returns the rendered messages as text.
        """
        if self.engine == "f-string":
            return self.template.format(**context)
        if self.engine == "jinja":
            with requires_extra("agl-types", "PromptTemplate(engine='jinja')"):
                import jinja2
            env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
            return env.from_string(self.template).render(**context)
        return _render_poml(self.template, context)


def _render_poml(template: str, context: dict[str, Any]) -> str:
    with requires_extra("agl-types", "PromptTemplate(engine='poml')"):
        import poml  # pyright: ignore[reportMissingTypeStubs]  # poml ships no type information
    # poml is untyped: its result is read as plain JSON-like data below.
    rendered: Any = cast(Any, poml).poml(template, context=context, format="openai_chat")
    messages: Any = (
        cast("dict[str, Any]", rendered).get("messages", rendered) if isinstance(rendered, dict) else rendered
    )
    parts: list[str] = []
    for message in messages:
        content: Any = (
            cast("dict[str, Any]", message).get("content", "") if isinstance(message, dict) else str(message)
        )
        parts.append(content if isinstance(content, str) else str(content))
    return "\n\n".join(parts)


ResourceUnion = Annotated[Union[LLM, ProxyLLM, PromptTemplate], Field(discriminator="resource_type")]  # noqa: UP007
NamedResources = dict[str, ResourceUnion]
"""Resources by name, e.g. ``{"main_llm": LLM(...), "system_prompt": PromptTemplate(...)}``."""


class ResourcesUpdate(BaseModel):
    """A versioned snapshot of named resources."""

    resources_id: str
    create_time: float
    update_time: float
    version: int = Field(ge=1)
    resources: NamedResources

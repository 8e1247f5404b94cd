"""Rendering chat messages into a prompt with the model's Jinja chat template, in a sandbox like HF's.

jinja2 is imported on the first template: a process that never renders one (`pocket bench`, plain `generate`)
keeps its ~2 MiB out of memory.
"""
import datetime
import json

from .builtin_templates import FAMILY_OF_ARCH, TEMPLATE_OF_FAMILY
from .errors import TokenizerError


def raise_exception(message: str):
    import jinja2

    raise jinja2.exceptions.TemplateError(message)


def strftime_now(date_format: str) -> str:
    return datetime.datetime.now().strftime(date_format)


def tojson(value, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def make_environment():
    """The sandbox HF transformers renders chat templates in (no attribute access to internals, no mutation)."""
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class ChatTemplate:
    def __init__(self, source: str, bos_token: str = "", eos_token: str = "", name: str = "file"):
        self.source = source
        self.name = name  # "file" or the built-in family it came from
        self.bos_token, self.eos_token = bos_token, eos_token
        import jinja2

        try:
            self._template = make_environment().from_string(source)
        except jinja2.TemplateSyntaxError as error:
            raise TokenizerError(f"chat template ({name}) does not parse: {error}") from error

    @property
    def supports_tools(self) -> bool:
        """The template renders a `tools` variable itself (HF convention); otherwise callers describe tools."""
        return "tools" in self.source

    def render(self, messages: list[dict], add_generation_prompt: bool = True, **variables) -> str:
        """Prompt text for `messages` ([{"role": ..., "content": ...}]); extra variables (tools, ...) pass through."""
        if self.name != "file":
            messages = [normalize_message(m) for m in messages]
        import jinja2

        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token, eos_token=self.eos_token, **variables)
        except jinja2.TemplateError as error:  # includes the sandbox's SecurityError and raise_exception()
            raise TokenizerError(f"chat template ({self.name}) failed: {error}") from error


def normalize_message(message: dict) -> dict:
    """Built-in templates take string content: join the text parts of OpenAI-style content lists."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return {**message, "content": content or ""}


def make_chat_template(metadata: dict, arch: str | None = None) -> ChatTemplate:
    """The file's tokenizer.chat_template, or the built-in template of the architecture's family."""
    bos_token, eos_token = _special_text(metadata, "bos"), _special_text(metadata, "eos")
    source = metadata.get("tokenizer.chat_template")
    if source:
        return ChatTemplate(source, bos_token, eos_token)
    arch = arch or metadata.get("general.architecture")
    family = FAMILY_OF_ARCH.get(arch)
    if family is None:
        raise TokenizerError(f"model file has no chat template and there is no built-in one for architecture "
                             f"{arch!r} (built-in: {', '.join(sorted(FAMILY_OF_ARCH))})")
    if family == "llama":
        family = "llama3" if "<|start_header_id|>" in (metadata.get("tokenizer.ggml.tokens") or ()) else "llama2"
    return ChatTemplate(TEMPLATE_OF_FAMILY[family], bos_token, eos_token, name=family)


def _special_text(metadata: dict, name: str) -> str:
    tokens = metadata.get("tokenizer.ggml.tokens")
    token_id = metadata.get(f"tokenizer.ggml.{name}_token_id")
    if tokens is None or token_id is None or not 0 <= int(token_id) < len(tokens):
        return ""
    return tokens[int(token_id)]

# Renders conversations with the real Qwen3.5 chat template through Jinja2 as Hugging Face's
# apply_chat_template sets it up (sandboxed, trim_blocks, lstrip_blocks, loopcontrols, its tojson and
# raise_exception), adding each line's "rendered": how tests/data/chat/qwen3.5-chat-tools.jsonl was
# made (python3-jinja2 3.1.6). It also reproduces every rendering of qwen3.5-chat.jsonl, which
# @huggingface/jinja made. usage: python3 chat_render_jinja.py TEMPLATE CASES.jsonl > OUT.jsonl
import json, sys, jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
def raise_exception(m): raise jinja2.exceptions.TemplateError(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
tpl = env.from_string(open(sys.argv[1]).read())
for line in open(sys.argv[2]):
    d = json.loads(line)
    kw = dict(d); kw.setdefault("add_generation_prompt", True)
    d["rendered"] = tpl.render(**kw)
    print(json.dumps(d, ensure_ascii=False))

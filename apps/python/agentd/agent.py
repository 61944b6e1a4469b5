"""agentd.Agent: agents written in Python.

An agent class derives from agentd.Agent and overrides reply() (plain or `async def`):

    class WebAgent(agentd.Agent):
        def __init__(self, name, timeout=1.0):
            super().__init__(name)
            self.timeout = timeout

        def reply(self, x):
            return agentd.Msg(self.name, {"url": x.content["url"]}, "assistant")

Constructed directly, `WebAgent("W0")` is a plain object in this process: `agent(x)` calls
reply(x). `WebAgent("W0").to_dist()` creates the same class, by name, with the same constructor
arguments, on an as_server started with this module's folder as --agent-dir, and returns an
agentd.AgentRef whose calls return placeholders. `as_server --agent-dir DIR` hosts every class
defined in DIR/*.py; the server's own C++ layer then gives the agent its memory, models, chunks
and durability through the context it attaches (see apps/python/hosting.h).
"""
import asyncio
import inspect
import os
import threading
import uuid
import weakref

from . import _agentd

__all__ = ["Agent", "method"]


def method(fn):
    """Exposes fn as a named method: `ref.call("fn", {"a": 1})` or `ref.fn(a=1)` runs fn(self, a=1)
    on the agent (a dict of arguments arrives as keyword arguments). It returns a plain value
    (None, bool, int, float, str, list, dict, bytes, agentd.Msg). It may be `async def`."""
    fn._agentd_method = True
    return fn


class _LocalMemory:
    """An agent's memory when it runs in this process (hosted agents use the server's)."""

    __slots__ = ("_msgs",)

    def __init__(self):
        self._msgs = []

    def add(self, msg):
        if isinstance(msg, (list, tuple)):
            self._msgs.extend(msg)
        elif msg is not None:
            self._msgs.append(msg)

    def get(self):
        return list(self._msgs)

    def clear(self):
        self._msgs.clear()

    def size(self):
        return len(self._msgs)

    def __len__(self):
        return len(self._msgs)


class _AgentMeta(type):
    """Records the constructor's arguments of an agent made in this process (to_dist sends them)."""

    def __call__(cls, *args, **kwargs):
        obj = cls.__new__(cls)
        obj._agentd_ctx = None
        obj._agentd_init = (args, kwargs)
        obj.__init__(*args, **kwargs)
        return obj


def _construct(cls, ctx, name, kwargs):
    """How as_server makes an agent (hosting.cpp): the context first, so that __init__ may already
    use self.id, self.memory and self.model()."""
    obj = cls.__new__(cls)
    obj._agentd_ctx = ctx
    obj.__init__(name, **kwargs)
    return obj


class Agent(metaclass=_AgentMeta):
    """The base class of agents written in Python (see the module's docstring)."""

    def __init__(self, name, **kwargs):
        self.name = name

    # ---- What the hosting server gives (a plain stand-in when the agent runs in this process) ----

    @property
    def id(self):
        ctx = self._agentd_ctx
        if ctx is not None:
            return ctx.id
        local = self.__dict__.get("_agentd_local_id")
        if local is None:
            local = self.__dict__["_agentd_local_id"] = uuid.uuid4().hex
        return local

    @property
    def memory(self):
        ctx = self._agentd_ctx
        if ctx is not None:
            return ctx.memory
        local = self.__dict__.get("_agentd_local_memory")
        if local is None:
            local = self.__dict__["_agentd_local_memory"] = _LocalMemory()
        return local

    def model(self, config_name):
        """The model configured under config_name on the hosting server (--model-config-path):
        an agentd.Model with chat(), stream(), embed(), and chat_async()/stream_async() for async
        agents. The server's retries, timeouts and token accounting apply."""
        ctx = self._agentd_ctx
        if ctx is None:
            raise _agentd.Error(
                f"agent '{self.name}' runs in this process, where no models are configured: "
                f"models belong to as_server (--model-config-path); move the agent there with "
                f"to_dist()", "config_error")
        return ctx.model(config_name)

    @property
    def tools(self):
        """The tools of the MCP servers configured on the hosting server (--tool-config-path),
        named SERVER/TOOL: an agentd.Tools with list(patterns), call(name, arguments) and, for
        async agents, call_async(). Each call is recorded in the running call's span."""
        ctx = self._agentd_ctx
        if ctx is None:
            raise _agentd.Error(
                f"agent '{self.name}' runs in this process, where no tool servers are configured: "
                f"tools belong to as_server (--tool-config-path); move the agent there with "
                f"to_dist()", "config_error")
        return ctx.tools()

    def emit_chunk(self, text):
        """Sends text to a caller that streams this reply (reply_stream) as its next chunk;
        dropped when nobody streams it."""
        ctx = self._agentd_ctx
        if ctx is not None:
            ctx.emit_chunk(text)

    @property
    def streaming(self):
        """True while the running call's caller reads chunks (worth streaming from the model)."""
        ctx = self._agentd_ctx
        return ctx is not None and ctx.streaming

    def connect(self, ref):
        """The agent an AgentRef (or its to_value() dict) names, as an agentd.AgentRef, reached over
        the hosting server's shared connections. Its reply() returns a Placeholder: get() it in a
        blocking agent, `await` it in an async one."""
        if isinstance(ref, _agentd.AgentRef):
            ref = ref.to_value()
        ctx = self._agentd_ctx
        if ctx is not None:
            return ctx.connect(ref)
        return _agentd._connect_ref(ref)

    # ---- What a subclass overrides ----

    def reply(self, x):
        raise NotImplementedError(f"{type(self).__name__} does not override reply()")

    def observe(self, x):
        """Takes a message without answering. Default: adds it to memory."""
        if x is not None:
            self.memory.add(x)

    def save_state(self):
        """This agent's own fields as plain values, saved after each call with --state-dir and
        copied by clone_agent; load_state() gets them back. Default: None."""
        return None

    def load_state(self, state):
        pass

    # ---- In this process ----

    def __call__(self, x=None):
        return self.reply(x)

    def to_dist(self, host=None, port=None, *, client=None, cluster=None, token="", **options):
        """This agent, created by class name with the same constructor arguments, on an as_server:
        a child server started for this module's folder (no arguments), a running one
        (host=, port=, token=), or the one a Client or Cluster reaches (client=, cluster=).
        Returns an agentd.AgentRef: reply(), __call__, observe() and named methods answer with
        placeholders. Agent code never travels: the server imports it from its --agent-dir."""
        cls = type(self)
        name, kwargs = _creation_args(cls, *self.__dict__.get("_agentd_init", ((self.name,), {})))
        if sum(x is not None for x in (client, cluster, host)) > 1:
            raise TypeError("agentd: to_dist() takes one of host/port, client= or cluster=")
        if cluster is not None:
            return cluster.create_agent(cls.__name__, name, kwargs)
        if client is None:
            if host is not None:
                if port is None:
                    raise TypeError("agentd: to_dist(host=...) needs port= too")
                client = _clients.connect(host, int(port), token, options)
            else:
                client = _clients.child(_module_dir(cls), token, options)
        return client.create_agent(cls.__name__, name, kwargs)


def _module_dir(cls):
    module = inspect.getmodule(cls)
    path = getattr(module, "__file__", None)
    if not path or getattr(module, "__name__", "") == "__main__":
        raise TypeError(
            f"agentd: to_dist() creates {cls.__name__} by name on a server that imports it from "
            f"its --agent-dir, so the class must be defined in a module file (not in __main__ or "
            f"an interactive session): move it to a .py file and import it")
    return os.path.dirname(os.path.abspath(path))


def _creation_args(cls, args, kwargs):
    """(name, kwargs) from a constructor call, every argument checked to be a plain value."""
    try:
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
    except TypeError as e:
        raise TypeError(f"agentd: {cls.__name__}{_call_text(args, kwargs)}: {e}") from None
    params = inspect.signature(cls.__init__).parameters
    first = list(params)[1] if len(params) > 1 else None  # the name's parameter, after self
    name = None
    out = {}
    for i, (key, value) in enumerate(bound.arguments.items()):
        kind = params[key].kind
        if i == 0:
            continue  # self
        if key == first and kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            name = value
            continue
        if kind == inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise TypeError(
                    f"agentd: {cls.__name__}(): positional arguments beyond the name (*{key}) cannot "
                    f"be sent to a server; pass them by keyword")
            continue
        if kind == inspect.Parameter.VAR_KEYWORD:
            items = value.items()
        else:
            items = [(key, value)]
        for k, v in items:
            try:
                _agentd._to_value(v)
            except (TypeError, ValueError) as e:
                raise TypeError(
                    f"agentd: {cls.__name__}() argument '{k}' is a {type(v).__name__}, not a plain "
                    f"value: to_dist() sends the constructor's arguments to the server as values "
                    f"(None, bool, int, float, str, bytes, list, dict, agentd.Msg, an agent); "
                    f"{e}") from None
            out[k] = v
    if not isinstance(name, str):
        raise TypeError(f"agentd: {cls.__name__}(name, ...): the agent's name must be a str")
    return name, out


def _call_text(args, kwargs):
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts)[:80] + ")"


class _Clients:
    """The servers to_dist() reaches, shared by the agents of this process: one child per module
    folder, one connection per host:port. They close when the process exits."""

    def __init__(self):
        self._mu = threading.Lock()
        self._children = {}
        self._connections = {}

    def child(self, folder, token, options):
        with self._mu:
            key = (folder, token, tuple(sorted((k, repr(v)) for k, v in options.items())))
            c = self._children.get(key)
            if c is None or c.closed:
                c = _agentd.Client.spawn_child(agent_dirs=[folder], token=token, **options)
                self._children[key] = c
            return c

    def connect(self, host, port, token, options):
        with self._mu:
            key = (host, port, token, tuple(sorted((k, repr(v)) for k, v in options.items())))
            c = self._connections.get(key)
            if c is None or c.closed:
                c = _agentd.Client.connect(host, port, token=token, **options)
                self._connections[key] = c
            return c

    def close(self):
        with self._mu:
            for c in list(self._children.values()) + list(self._connections.values()):
                c.close()
            self._children.clear()
            self._connections.clear()


_clients = _Clients()


# ---- Awaiting agentd's results inside asyncio (async agents, and main programs using asyncio) ----

_completions = weakref.WeakKeyDictionary()
_completions_mu = threading.Lock()


def _completions_of(loop):
    """The loop's agentd.Completions: results agentd delivers on other threads reach this loop's
    thread through it (an eventfd the loop watches), never by taking the GIL elsewhere."""
    with _completions_mu:
        c = _completions.get(loop)
        if c is None:
            c = _completions[loop] = _agentd._Completions(loop)
        return c


def _await_placeholder(self):
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    _completions_of(loop).when_ready(self, fut)
    return (yield from fut.__await__())


_agentd.Placeholder.__await__ = _await_placeholder


def _named_method(self, name):
    """ref.NAME(**args) == ref.call_async(NAME, args): named methods as attributes of an AgentRef."""
    if name.startswith("_"):
        raise AttributeError(name)

    def call(*args, **kwargs):
        if args and kwargs or len(args) > 1:
            raise TypeError(f"agentd: {name}() takes keyword arguments or one value")
        return self.call_async(name, args[0] if args else kwargs)

    call.__name__ = name
    return call


_agentd.AgentRef.__getattr__ = _named_method


# ---- Loading agent folders (as_server --agent-dir; called by hosting.cpp) ----


def _load_agent_dirs(dirs):
    """Imports every DIR/*.py (sorted) and returns [(class name, source, class, description)] for
    each class defined there deriving from Agent. Raises RuntimeError naming FILE:LINE for a module
    that fails to import, or both files for a class name defined twice."""
    import importlib.util
    import sys
    import traceback

    found = []
    where = {}
    modules = {}
    for d in dirs:
        d = os.path.abspath(d)
        if d not in sys.path:
            sys.path.insert(0, d)  # agent modules may import their neighbours
    for d in dirs:
        d = os.path.abspath(d)
        for entry in sorted(os.listdir(d)):
            if not entry.endswith(".py") or entry.startswith("."):
                continue
            path = os.path.join(d, entry)
            stem = entry[:-3]
            if stem in modules and modules[stem] != path:
                raise RuntimeError(f"{path}: a module named '{stem}' is already loaded from "
                                   f"{modules[stem]}; rename one (module names are global in Python)")
            module = sys.modules.get(stem)
            if module is None or os.path.abspath(getattr(module, "__file__", "") or "") != path:
                spec = importlib.util.spec_from_file_location(stem, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[stem] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException as e:  # noqa: B036 (SystemExit at import is a failure too)
                    del sys.modules[stem]
                    raise RuntimeError(_import_failure(path, e)) from None
            modules[stem] = path
            for value in list(vars(module).values()):
                if not (isinstance(value, type) and issubclass(value, Agent) and value is not Agent):
                    continue
                if value.__module__ != module.__name__:
                    continue  # imported from elsewhere; registered where it is defined
                if value.__name__ in where:
                    raise RuntimeError(
                        f"agent class '{value.__name__}' is defined twice: in {where[value.__name__]} "
                        f"and in {path}; class names must be unique on a server")
                where[value.__name__] = path
                found.append((value.__name__, path, value, _describe(value)))
    return found


def _import_failure(path, e):
    """FILE:LINE: what went wrong, for a module that failed to import."""
    import traceback

    if isinstance(e, SyntaxError) and e.filename:
        return f"{e.filename}:{e.lineno}: {type(e).__name__}: {e.msg} (importing {path} for --agent-dir)"
    line = None
    for frame in traceback.extract_tb(e.__traceback__):
        if os.path.abspath(frame.filename) == path:
            line = frame.lineno
    tail = "".join(traceback.format_exception_only(type(e), e)).strip()
    return f"{path}:{line or 1}: importing it for --agent-dir failed: {tail}"


def _describe(cls):
    """What the C++ host needs to know of a class, read once at load."""
    methods = {}
    for name in dir(cls):
        fn = getattr(cls, name, None)
        if callable(fn) and getattr(fn, "_agentd_method", False):
            methods[name] = inspect.iscoroutinefunction(fn)
    return {
        "async_reply": inspect.iscoroutinefunction(cls.reply),
        "async_observe": inspect.iscoroutinefunction(cls.observe),
        "custom_observe": cls.observe is not Agent.observe,
        "custom_state": cls.save_state is not Agent.save_state or cls.load_state is not Agent.load_state,
        "methods": methods,
    }


def _format_exception(exc):
    """"Type: message" and the last frames of its traceback (agentd's own frames left out), for
    the agent_failed error a caller gets."""
    import traceback

    head = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    here = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.dirname(os.path.abspath(f.filename)) != here]
    frames = frames[-8:]
    if not frames:
        return head
    return head + "\nTraceback (most recent call last):\n" + "".join(traceback.format_list(frames)).rstrip()

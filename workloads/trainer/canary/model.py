"""A Llama-style decoder in flax: RMSNorm, rotary attention with grouped KV heads, SwiGLU."""

from __future__ import annotations

from dataclasses import dataclass

import flax.linen as nn
import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 256  # byte-level
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 32
    d_ff: int = 384
    max_seq_len: int = 128
    rope_theta: float = 10_000.0
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} must be a multiple of n_kv_heads {self.n_kv_heads}")

    def param_count(self) -> int:
        attn = self.d_model * self.head_dim * (2 * self.n_heads + 2 * self.n_kv_heads)
        mlp = 3 * self.d_model * self.d_ff
        per_layer = attn + mlp + 2 * self.d_model
        return 2 * self.vocab_size * self.d_model + self.n_layers * per_layer + self.d_model

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6 x (non-embedding) parameters plus attention (PaLM appendix B)."""
        dense = self.param_count() - self.vocab_size * self.d_model
        attention = 12 * self.n_layers * self.n_heads * self.head_dim * seq_len
        return 6.0 * dense + attention


class RMSNorm(nn.Module):
    eps: float = 1e-6

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        variance = jnp.mean(jnp.square(x.astype(jnp.float32)), axis=-1, keepdims=True)
        return (x * jax.lax.rsqrt(variance + self.eps)).astype(x.dtype) * scale


def rotary(x: jax.Array, theta: float) -> jax.Array:
    """Apply rotary position embeddings to [batch, seq, heads, head_dim]."""
    seq, dim = x.shape[1], x.shape[-1]
    freqs = 1.0 / (theta ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
    angles = jnp.arange(seq, dtype=jnp.float32)[:, None] * freqs[None, :]
    sin, cos = jnp.sin(angles)[None, :, None, :], jnp.cos(angles)[None, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).astype(x.dtype)


class Attention(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = self.config
        batch, seq, _ = x.shape
        q = nn.Dense(c.n_heads * c.head_dim, use_bias=False, name="q")(x).reshape(batch, seq, c.n_heads, c.head_dim)
        k = nn.Dense(c.n_kv_heads * c.head_dim, use_bias=False, name="k")(x).reshape(
            batch, seq, c.n_kv_heads, c.head_dim
        )
        v = nn.Dense(c.n_kv_heads * c.head_dim, use_bias=False, name="v")(x).reshape(
            batch, seq, c.n_kv_heads, c.head_dim
        )
        q, k = rotary(q, c.rope_theta), rotary(k, c.rope_theta)
        groups = c.n_heads // c.n_kv_heads
        k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(c.head_dim).astype(x.dtype)
        causal = jnp.tril(jnp.ones((seq, seq), dtype=bool))
        logits = jnp.where(causal[None, None], logits, jnp.finfo(logits.dtype).min)
        weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(x.dtype)
        out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, seq, c.n_heads * c.head_dim)
        return nn.Dense(c.d_model, use_bias=False, name="o")(out)


class SwiGLU(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = self.config
        gate = nn.Dense(c.d_ff, use_bias=False, name="gate")(x)
        up = nn.Dense(c.d_ff, use_bias=False, name="up")(x)
        return nn.Dense(c.d_model, use_bias=False, name="down")(nn.silu(gate) * up)


class Block(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + Attention(self.config, name="attention")(RMSNorm(name="attention_norm")(x))
        return x + SwiGLU(self.config, name="mlp")(RMSNorm(name="mlp_norm")(x))


class Decoder(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        c = self.config
        x = nn.Embed(c.vocab_size, c.d_model, name="embed", dtype=jnp.dtype(c.dtype))(tokens)
        for i in range(c.n_layers):
            x = Block(c, name=f"layer_{i}")(x)
        x = RMSNorm(name="final_norm")(x)
        return nn.Dense(c.vocab_size, use_bias=False, name="lm_head")(x)

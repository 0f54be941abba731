-- One LLaMA transformer block, forward: RMSNorm, rotary position embeddings, causal softmax attention in
-- 8 heads, a residual, RMSNorm, a SwiGLU feed-forward layer (hidden 256 * ceil(8 * 512 / 3 / 256) = 1,536)
-- and a second residual, over a sequence of 256 vectors of dimension 512 (head dimension 64).
-- Heads are relational: Wq, Wk and Wv are stored in one tile of 64 columns per head, so the queries, keys
-- and values come out as one (256 x 64) tile per head, keyed by the head; attention joins them on it, and
-- Wo's tiles of 64 rows sum the heads back. benchmarks/llama_block.py runs these views at this size and at
-- dimension 1024, 16 heads, sequence 512 against PyTorch.

-- plain SQL: the rotary tables (angle s * 10000^(-p / 32) for position s and pair p) and the causal mask
CREATE OR REPLACE VIEW llama_rope AS
    SELECT s, p, a, cos(s * pow(10000, -p / 32)) AS c, (2 * a - 1) * sin(s * pow(10000, -p / 32)) AS sn
    FROM range(256) AS r(s), range(32) AS q(p), range(2) AS b(a);
CREATE OR REPLACE VIEW llama_future AS
    SELECT s, t, '-inf'::DOUBLE AS m FROM range(256) AS a(s), range(256) AS b(t) WHERE t > s;
CREATE OR REPLACE VIEW llama_swap AS SELECT a, 1 - a AS b, 1.0 AS one FROM range(2) AS t(a);
-- a rotation of the pairs (x0, x1) of each head's 64 values is x * cos + swap(x) * sin, with
-- rope_cos = (cos, cos), rope_sin = (-sin, sin) and swap(x0, x1) = (x1, x0), a product by pair_swap
CREATE OR REPLACE TENSOR rope_cos (i) FROM COO llama_rope (s, p, a, c) SHAPE (256, 32, 2) TILE (256, 32, 2);
CREATE OR REPLACE TENSOR rope_sin (i) FROM COO llama_rope (s, p, a, sn) SHAPE (256, 32, 2) TILE (256, 32, 2);
CREATE OR REPLACE TENSOR pair_swap FROM COO llama_swap (a, b, one) SHAPE (2, 2) TILE (2, 2);
CREATE OR REPLACE TENSOR causal_mask FROM COO llama_future (s, t, m) SHAPE (256, 256) TILE (256, 256);

-- the input and the weights
CREATE OR REPLACE TENSOR X SHAPE (256, 512) TILE (256, 512) FILL RANDOM_NORMAL(0, 1, 51);
CREATE OR REPLACE TENSOR attention_norm SHAPE (512) TILE (512) FILL RANDOM_UNIFORM(0.5, 1.5, 52);
CREATE OR REPLACE TENSOR ffn_norm SHAPE (512) TILE (512) FILL RANDOM_UNIFORM(0.5, 1.5, 53);
CREATE OR REPLACE TENSOR Wq SHAPE (512, 512) TILE (512, 64) FILL RANDOM_NORMAL(0, 0.044, 54);
CREATE OR REPLACE TENSOR Wk SHAPE (512, 512) TILE (512, 64) FILL RANDOM_NORMAL(0, 0.044, 55);
CREATE OR REPLACE TENSOR Wv SHAPE (512, 512) TILE (512, 64) FILL RANDOM_NORMAL(0, 0.044, 56);
CREATE OR REPLACE TENSOR Wo SHAPE (512, 512) TILE (64, 512) FILL RANDOM_NORMAL(0, 0.044, 57);
CREATE OR REPLACE TENSOR W1 SHAPE (512, 1536) TILE (512, 1536) FILL RANDOM_NORMAL(0, 0.044, 58);
CREATE OR REPLACE TENSOR W3 SHAPE (512, 1536) TILE (512, 1536) FILL RANDOM_NORMAL(0, 0.044, 59);
CREATE OR REPLACE TENSOR W2 SHAPE (1536, 512) TILE (1536, 512) FILL RANDOM_NORMAL(0, 0.0255, 60);

-- the block, one view a stage; RMSNorm(x) = x / sqrt(mean(x^2) + 1e-5) * gain, along each row
CREATE OR REPLACE VIEW llama_xn AS
    SELECT X.i, X.j, X.v / SQRT(RESHAPE(REDUCE_MEAN(SQUARE(X.v), 1), (-1, 1)) + 1e-5) * g.v AS v
    FROM X JOIN attention_norm AS g ON g.i = X.j;
CREATE OR REPLACE VIEW llama_q AS
    SELECT p.i, p.j, RESHAPE(RESHAPE(p.v, (-1, 32, 2)) * c.v + MATMUL(RESHAPE(p.v, (-1, 32, 2)), w.v) * s.v, (-1, 64)) AS v
    FROM (SELECT x.i, Wq.j, SUM(MATMUL(x.v, Wq.v)) AS v FROM llama_xn AS x JOIN Wq ON x.j = Wq.i GROUP BY x.i, Wq.j) AS p
    JOIN rope_cos AS c ON c.i = p.i JOIN rope_sin AS s ON s.i = p.i CROSS JOIN pair_swap AS w;
CREATE OR REPLACE VIEW llama_k AS
    SELECT p.i, p.j, RESHAPE(RESHAPE(p.v, (-1, 32, 2)) * c.v + MATMUL(RESHAPE(p.v, (-1, 32, 2)), w.v) * s.v, (-1, 64)) AS v
    FROM (SELECT x.i, Wk.j, SUM(MATMUL(x.v, Wk.v)) AS v FROM llama_xn AS x JOIN Wk ON x.j = Wk.i GROUP BY x.i, Wk.j) AS p
    JOIN rope_cos AS c ON c.i = p.i JOIN rope_sin AS s ON s.i = p.i CROSS JOIN pair_swap AS w;
-- per head: softmax(q k^T / sqrt(64) + mask) v, the mask -inf above the diagonal
CREATE OR REPLACE VIEW llama_attention AS
    SELECT q.i, q.j, MATMUL(SOFTMAX(MATMUL(q.v, TRANSPOSE(k.v)) * 0.125 + m.v, 1), vv.v) AS v
    FROM llama_q AS q JOIN llama_k AS k ON k.i = q.i AND k.j = q.j
    JOIN (SELECT x.i, Wv.j, SUM(MATMUL(x.v, Wv.v)) AS v FROM llama_xn AS x JOIN Wv ON x.j = Wv.i GROUP BY x.i, Wv.j) AS vv
         ON vv.i = q.i AND vv.j = q.j
    CROSS JOIN causal_mask AS m;
CREATE OR REPLACE VIEW llama_h AS
    SELECT X.i, X.j, X.v + o.v AS v
    FROM X JOIN (SELECT a.i, Wo.j, SUM(MATMUL(a.v, Wo.v)) AS v FROM llama_attention AS a JOIN Wo ON a.j = Wo.i
                 GROUP BY a.i, Wo.j) AS o ON o.i = X.i AND o.j = X.j;
CREATE OR REPLACE VIEW llama_hn AS
    SELECT h.i, h.j, h.v / SQRT(RESHAPE(REDUCE_MEAN(SQUARE(h.v), 1), (-1, 1)) + 1e-5) * g.v AS v
    FROM llama_h AS h JOIN ffn_norm AS g ON g.i = h.j;
-- SwiGLU: (silu(hn W1) * (hn W3)) W2, silu(a) = a * sigmoid(a); plus the residual
CREATE OR REPLACE VIEW llama_block AS
    SELECT h.i, h.j, h.v + f.v AS v
    FROM llama_h AS h JOIN
        (SELECT u.i, W2.j, SUM(MATMUL(u.v, W2.v)) AS v
         FROM (SELECT a.i, a.j, a.v * SIGMOID(a.v) * b.v AS v
               FROM (SELECT x.i, W1.j, SUM(MATMUL(x.v, W1.v)) AS v FROM llama_hn AS x JOIN W1 ON x.j = W1.i
                     GROUP BY x.i, W1.j) AS a
               JOIN (SELECT x.i, W3.j, SUM(MATMUL(x.v, W3.v)) AS v FROM llama_hn AS x JOIN W3 ON x.j = W3.i
                     GROUP BY x.i, W3.j) AS b
               ON a.i = b.i AND a.j = b.j) AS u
         JOIN W2 ON u.j = W2.i GROUP BY u.i, W2.j) AS f
    ON f.i = h.i AND f.j = h.j;

CREATE OR REPLACE TENSOR block_out AS SELECT * FROM llama_block;
SELECT SUM(SUMSQ(b.v)) AS squared_norm FROM block_out AS b;

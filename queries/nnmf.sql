-- Non-negative matrix factorization: V (1024 x 1024) ≈ W (1024 x 32) · H (32 x 1024) with W, H >= 0, by
-- projected Adam steps on the squared error: each step of MINIMIZE takes the gradient of the loss, steps W
-- and H, then clips them at 0 (clamp_min = 0). V is made from non-negative factors of rank 32, so an exact
-- factorization exists; half the entries of W_true are 0, so the clamp has work to do.
-- benchmarks/nnmf.py runs these views at larger sizes against PyTorch.
CREATE OR REPLACE TENSOR W_true SHAPE (1024, 32) TILE (512, 32) FILL RANDOM_NORMAL(0, 1, 71);
CREATE OR REPLACE TENSOR W_true AS SELECT W_true.i, W_true.j, RELU(W_true.v) AS v FROM W_true;
CREATE OR REPLACE TENSOR H_true SHAPE (32, 1024) TILE (32, 512) FILL RANDOM_UNIFORM(0, 1, 72);
CREATE OR REPLACE TENSOR V AS
    SELECT W_true.i, H_true.j, SUM(MATMUL(W_true.v, H_true.v)) AS v
    FROM W_true JOIN H_true ON W_true.j = H_true.i GROUP BY W_true.i, H_true.j;
-- the factors start positive and small (uniform in [0, 1) times 0.5)
CREATE OR REPLACE TENSOR W SHAPE (1024, 32) TILE (512, 32) FILL RANDOM_UNIFORM(0, 0.5, 73);
CREATE OR REPLACE TENSOR H SHAPE (32, 1024) TILE (32, 512) FILL RANDOM_UNIFORM(0, 0.5, 74);
-- the loss: the sum of squared errors of the product against V, tile by tile
CREATE OR REPLACE VIEW nnmf_loss AS
    SELECT SUM(SUMSQ(V.v - p.v)) AS v
    FROM V JOIN (SELECT W.i, H.j, SUM(MATMUL(W.v, H.v)) AS v FROM W JOIN H ON W.j = H.i GROUP BY W.i, H.j) AS p
         ON V.i = p.i AND V.j = p.j;
MINIMIZE nnmf_loss WRT (W, H) WITH (optimizer = 'adam', learning_rate = 0.05, steps = 60, clamp_min = 0);
-- the relative error of the factorization, and the smallest entry of each factor (never below 0)
SELECT SQRT(SUM(SUMSQ(V.v - p.v)) / SUM(SUMSQ(V.v))) AS relative_error
    FROM V JOIN (SELECT W.i, H.j, SUM(MATMUL(W.v, H.v)) AS v FROM W JOIN H ON W.j = H.i GROUP BY W.i, H.j) AS p
         ON V.i = p.i AND V.j = p.j;
SELECT -MAX(REDUCE_MAX(-W.v)) AS w_lowest FROM W;
SELECT -MAX(REDUCE_MAX(-H.v)) AS h_lowest FROM H;

-- A transformer attention block written with EINSUM: softmax(Q K^T / sqrt(d)) V, Q = X Wq, K = X Wk, V = X Wv.
CREATE TENSOR X SHAPE (256, 64) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 71);
CREATE TENSOR Wq SHAPE (64, 32) TILE (64, 32) FILL RANDOM_NORMAL(0, 0.125, 72);
CREATE TENSOR Wk SHAPE (64, 32) TILE (64, 32) FILL RANDOM_NORMAL(0, 0.125, 73);
CREATE TENSOR Wv SHAPE (64, 32) TILE (64, 32) FILL RANDOM_NORMAL(0, 0.125, 74);
CREATE TENSOR Q AS SELECT * FROM EINSUM('nd,dh->nh', X, Wq);
-- keys and values in one tile along the sequence, so each score row is whole in one tile
CREATE TENSOR K AS SELECT * FROM RETILE(EINSUM('md,dh->mh', X, Wk), (256, 32));
CREATE TENSOR V AS SELECT * FROM RETILE(EINSUM('md,dh->mh', X, Wv), (256, 32));
CREATE TENSOR S AS SELECT * FROM EINSUM('nh,mh->nm', Q, K);
CREATE TENSOR P AS SELECT S.n, S.m, SOFTMAX(S.v / 5.656854249, 1) AS v FROM S;
CREATE TENSOR O AS SELECT * FROM EINSUM('nm,mh->nh', P, V);
DESCRIBE O;
SELECT SUM(SUMSQ(O.v)) AS squared_norm FROM O;

-- A 2-layer graph convolution network (GCN) classifying the nodes of a graph, trained with Adam:
--     logits = Â · RELU(Â · X · W1) · W2,   Â = D^-1/2 (A + I) D^-1/2,
-- softmax cross-entropy (CROSS_ENTROPY) averaged over the training nodes only, then the accuracy on the
-- nodes it never trained on. The default graph is the size of the Cora citation graph: 2,708 nodes in 7
-- classes, about 10,000 edges (5,000 random pairs, four in five within a class), 1,433 features whose means
-- depend a little on the class, 16 hidden units, about 5% of the nodes for training.
-- benchmarks/gcn.py runs these views at Cora's and at ogbn-arxiv's size (169,343 nodes, 1.17M edges,
-- 128 -> 256 -> 40) against PyTorch; docs/workloads.md walks through this file.

-- the graph, made in plain SQL (DuckDB's tables): node n is in class n % 7
CREATE OR REPLACE TABLE gcn_pairs AS
    SELECT hash(k) % 2708 AS a,
           CASE WHEN hash(k + 2000003) % 5 = 0 THEN hash(k + 1000003) % 2708
                ELSE (hash(k + 1000003) % 386) * 7 + hash(k) % 2708 % 7 END AS b
    FROM range(5000) AS r(k);
CREATE OR REPLACE TABLE gcn_edges AS
    SELECT DISTINCT src, dst FROM (SELECT a AS src, b AS dst FROM gcn_pairs UNION ALL SELECT b, a FROM gcn_pairs
                                   UNION ALL SELECT n, n FROM range(2708) AS t(n));
-- each edge weighted 1 / sqrt(degree(src) * degree(dst)): the entries of Â
CREATE OR REPLACE VIEW gcn_adjacency AS
    SELECT e.src, e.dst, 1 / sqrt(d1.d * d2.d) AS w FROM gcn_edges AS e
    JOIN (SELECT src, count(*) AS d FROM gcn_edges GROUP BY src) AS d1 ON d1.src = e.src
    JOIN (SELECT src, count(*) AS d FROM gcn_edges GROUP BY src) AS d2 ON d2.src = e.dst;
CREATE OR REPLACE VIEW gcn_classes AS SELECT n AS node, n % 7 AS class, 1.0 AS one FROM range(2708) AS t(n);

-- the tensors: Â as one sparse (CSR) tile, one-hot classes, features = noise + the class's mean
CREATE OR REPLACE TENSOR A_hat FROM COO gcn_adjacency (src, dst, w) SHAPE (2708, 2708) TILE (2708, 2708);
CREATE OR REPLACE TENSOR Y FROM COO gcn_classes (node, class, one) SHAPE (2708, 7) TILE (2708, 7);
CREATE OR REPLACE TENSOR labels AS SELECT Y.i, ARGMAX(Y.v, 1) AS v FROM Y;
CREATE OR REPLACE TENSOR class_means SHAPE (7, 1433) TILE (7, 1433) FILL RANDOM_NORMAL(0, 0.05, 42);
CREATE OR REPLACE TENSOR noise SHAPE (2708, 1433) TILE (2708, 1433) FILL RANDOM_NORMAL(0, 1, 41);
CREATE OR REPLACE TENSOR X AS
    SELECT noise.i, noise.j, noise.v + m.v AS v
    FROM noise JOIN (SELECT Y.i, class_means.j, SUM(MATMUL(Y.v, class_means.v)) AS v
                     FROM Y JOIN class_means ON Y.j = class_means.i GROUP BY Y.i, class_means.j) AS m
         ON noise.i = m.i AND noise.j = m.j;
DROP TENSOR noise;
-- about 5% of the nodes train; each training node's loss is weighted 1 / (number of training nodes)
CREATE OR REPLACE TENSOR split SHAPE (2708) TILE (2708) FILL RANDOM_UNIFORM(0, 1, 43);
CREATE OR REPLACE TENSOR train_mask AS SELECT split.i, CAST(split.v < 0.052 AS float32) AS v FROM split;
CREATE OR REPLACE TENSOR train_weight AS
    SELECT m.i, m.v / c.v AS v
    FROM train_mask AS m CROSS JOIN (SELECT SUM(REDUCE_SUM(t.v)) AS v FROM train_mask AS t) AS c;

-- the parameters (Glorot-uniform)
CREATE OR REPLACE TENSOR W1 SHAPE (1433, 16) TILE (1433, 16) FILL RANDOM_UNIFORM(-0.0643, 0.0643, 44);
CREATE OR REPLACE TENSOR W2 SHAPE (16, 7) TILE (16, 7) FILL RANDOM_UNIFORM(-0.5108, 0.5108, 45);

-- the model: each product a join on the shared index and a SUM of MATMULs of tiles
CREATE OR REPLACE VIEW gcn_hidden AS
    SELECT A.i, xw.j, RELU(SUM(MATMUL(A.v, xw.v))) AS v
    FROM A_hat AS A JOIN (SELECT X.i, W1.j, SUM(MATMUL(X.v, W1.v)) AS v FROM X JOIN W1 ON X.j = W1.i
                          GROUP BY X.i, W1.j) AS xw ON A.j = xw.i
    GROUP BY A.i, xw.j;
CREATE OR REPLACE VIEW gcn_logits AS
    SELECT A.i, hw.j, SUM(MATMUL(A.v, hw.v)) AS v
    FROM A_hat AS A JOIN (SELECT h.i, W2.j, SUM(MATMUL(h.v, W2.v)) AS v FROM gcn_hidden AS h JOIN W2 ON h.j = W2.i
                          GROUP BY h.i, W2.j) AS hw ON A.j = hw.i
    GROUP BY A.i, hw.j;
CREATE OR REPLACE VIEW gcn_loss AS
    SELECT SUM(REDUCE_SUM(CROSS_ENTROPY(z.v, y.v, 1) * w.v)) AS v
    FROM gcn_logits AS z JOIN labels AS y ON y.i = z.i JOIN train_weight AS w ON w.i = z.i;

-- training: one row (step, loss) a step
MINIMIZE gcn_loss WRT (W1, W2) WITH (optimizer = 'adam', learning_rate = 0.01, steps = 50);
-- the accuracy on the nodes that did not train
SELECT SUM(REDUCE_SUM(CAST(ARGMAX(z.v, 1) = y.v AS float32) * (1 - m.v))) / SUM(REDUCE_SUM(1 - m.v)) AS test_accuracy
    FROM gcn_logits AS z JOIN labels AS y ON y.i = z.i JOIN train_mask AS m ON m.i = z.i;

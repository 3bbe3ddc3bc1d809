"""s001-mlp written again by hand, as a plug-in, for ``benchmarks/fidelity.py``: the
seed's manual-SGD MLP (docs/STUDY.md, S001) in eager TensorFlow, independent of the
study's own workload code.

x (batch x d_in) -> w1 -> relu -> w2 -> relu -> w3 (8 x 8), squared-error sum, a
``GradientTape``, SGD (lr 1e-9) on w1 and w2 only, the loss read every 1 000 steps.
"""

import tensorflow as tf

from crossover_study.plugin import TFStep

D_OUT = 8
LR = 1e-9


def build(device, batch: int, d_in: int, hidden: int) -> TFStep:
    """The eager step on a fixed batch of ``batch`` x ``d_in``, ``hidden`` units."""
    tf.random.set_seed(0)
    x = tf.random.normal((batch, d_in))
    y = tf.random.normal((batch, D_OUT))
    w1 = tf.Variable(tf.random.normal((d_in, hidden)))
    w2 = tf.Variable(tf.random.normal((hidden, D_OUT)))
    w3 = tf.Variable(tf.random.normal((D_OUT, D_OUT)))

    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.maximum(tf.matmul(tf.maximum(tf.matmul(x, w1), 0.0), w2), 0.0)
            loss = tf.reduce_sum(tf.square(tf.matmul(h, w3) - y))
        g1, g2, _ = tape.gradient(loss, [w1, w2, w3])
        w1.assign_sub(LR * g1)
        w2.assign_sub(LR * g2)
        return loss

    return TFStep(step, data=(x, y), loss_read_every=1000)

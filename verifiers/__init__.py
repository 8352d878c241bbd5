"""
Verifiers beyond token-wise: one file per method, each registering its round in speculative.ROUNDS.

speculative.py holds the core round (Chen et al.'s Algorithm 2, verify="tokenwise") and never imports this
package; `import verifiers` adds the others by name, so speculative_generate(..., verify="block") finds them:

    block.py   block verification (Sun et al. 2024): lossless, never fewer tokens per round
    tree.py    draft trees and several drafts at the root (SpecInfer, Sequoia, EAGLE-2): lossless
    lossy.py   lenient and typical acceptance: LOSSY, with the exact total variation they cost

Every round has speculative_round's signature (target, draft, tokens, k, probs, generator) -> drafts kept, and
draws through speculative.sample() and speculative.coin(), called as module attributes so that the tests'
enumeration of every branch reaches them. A fork's verifier is one more file with one more ROUNDS entry.
"""

from verifiers import block, lossy, tree  # noqa: F401  (each registers its rounds in speculative.ROUNDS)

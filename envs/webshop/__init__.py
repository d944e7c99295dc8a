"""WebShop: product search and purchase under compositional constraints.

Files, in the order an episode uses them:
- vocab.py      the store's categories, product types, attributes and option values
- catalogue.py  deterministic products + instructions (`prepare`), splits
- simulator.py  WebShop's page flow and text observations, bm25s search
- reward.py     WebShop's purchase reward (type x attributes/options/price)
- pages.py      reading pages and instructions as a shopper sees them
- belief.py     the Belief tracker (constraints, candidates, options, price)
- teacher.py    the scripted shopper
- prompts.py    the paper's WebShop prompts and the EnvSpec
- adapter.py    `make_webshop_env(env_cfg)`: simulator or a real WebShop checkout
- grounding.py  WebShop wording for the heuristic Experience consolidator (evoharness_rl/experience)
"""

"""Room templates and placement priors for generated ALFWorld games (data, no logic).

Type names are the ALFRED class names (`Mug`, `CounterTop`) used in PDDL; the engine
shows them lower-cased with an instance number ("mug 1", "countertop 2"). The tables:

- `ROOMS[room]`: the receptacle types a room can have (`weight` for how many of the
  room's receptacles are of that type, `max` instances), the receptacle types every
  layout of that room must have (so each task family the room supports is possible),
  and the object types found there with their relative frequency.
- `PLACEMENT_PRIORS[object]`: where an object starts, as probabilities over receptacle
  types (lower-case display names, e.g. `PLACEMENT_PRIORS["kettle"]["stoveburner"]`).
  A layout without some of those receptacles renormalises over the ones it has. These
  are the regularities cross-episode Experience can learn ("kettles are usually on a
  stoveburner"), so they are skewed on purpose.
- `SIZES[size]`: receptacle and object counts per game (small ~5 receptacles, large ~30
  receptacles and ~60 objects, the size of real ALFRED scenes).
- `FAMILY_ROOMS`: which rooms each task family is generated in (ALFRED's `GOALS_VALID`).
- `FAMILY_PROPORTIONS`: per-family game counts of the official ALFWorld splits, used to
  split any requested number of games the same way.
"""

from __future__ import annotations

import re

ROOMS: dict[str, dict] = {
    "kitchen": {
        "scene_base": 0,  # ALFRED numbers kitchens 1-30
        "required": ["Fridge", "Microwave", "SinkBasin", "CounterTop"],
        "receptacles": {  # type: (weight, max instances)
            "Cabinet": (10.0, 12),
            "Drawer": (6.0, 8),
            "StoveBurner": (3.0, 4),
            "CounterTop": (2.0, 3),
            "DiningTable": (1.5, 1),
            "Shelf": (1.0, 3),
            "GarbageCan": (1.0, 1),
            "CoffeeMachine": (1.0, 1),
            "Toaster": (0.7, 1),
            "Fridge": (0.0, 1),
            "Microwave": (0.0, 1),
            "SinkBasin": (0.0, 1),
        },
        "objects": {
            "Apple": 3, "Bread": 2, "ButterKnife": 2, "Cup": 3, "DishSponge": 2, "Egg": 3, "Fork": 2,
            "Kettle": 2, "Knife": 2, "Ladle": 1.5, "Lettuce": 2, "Mug": 3, "Pan": 2, "PepperShaker": 2,
            "Plate": 3, "Pot": 2, "Potato": 3, "SaltShaker": 2, "SoapBottle": 1.5, "Spatula": 2, "Spoon": 2,
            "Tomato": 3, "WineBottle": 1, "Bowl": 3, "Glassbottle": 1,
        },
    },
    "livingroom": {
        "scene_base": 200,  # ALFRED numbers living rooms 201-230
        "required": ["Sofa", "CoffeeTable", "SideTable"],
        "receptacles": {
            "Drawer": (4.0, 6),
            "Shelf": (3.0, 6),
            "Cabinet": (3.0, 6),
            "SideTable": (2.0, 3),
            "ArmChair": (1.5, 2),
            "DiningTable": (1.0, 1),
            "GarbageCan": (1.0, 1),
            "TVStand": (1.0, 1),
            "Dresser": (0.7, 1),
            "Ottoman": (0.5, 1),
            "Sofa": (0.0, 1),
            "CoffeeTable": (0.0, 1),
        },
        "objects": {
            "Box": 2, "CreditCard": 3, "KeyChain": 3, "Laptop": 2, "Newspaper": 2, "Pillow": 2,
            "RemoteControl": 3, "Statue": 2, "Vase": 2, "Watch": 2, "WateringCan": 1, "TissueBox": 1.5,
            "Plate": 1, "Bowl": 1, "CellPhone": 1.5, "Book": 1,
        },
        "lamps": {"FloorLamp": 2, "DeskLamp": 1},
    },
    "bedroom": {
        "scene_base": 300,  # ALFRED numbers bedrooms 301-330
        "required": ["Bed", "Desk", "SideTable"],
        "receptacles": {
            "Drawer": (5.0, 10),
            "Shelf": (3.0, 8),
            "SideTable": (1.5, 2),
            "Dresser": (1.0, 1),
            "GarbageCan": (1.0, 1),
            "ArmChair": (0.7, 2),
            "Safe": (0.5, 1),
            "LaundryHamper": (0.5, 1),
            "Bed": (0.0, 1),
            "Desk": (0.0, 1),
        },
        "objects": {
            "AlarmClock": 3, "BaseballBat": 1, "BasketBall": 1, "Book": 3, "CD": 2, "CellPhone": 3,
            "CreditCard": 2, "KeyChain": 2, "Laptop": 2, "Pen": 2, "Pencil": 2, "Pillow": 2,
            "TennisRacket": 1, "Mug": 2, "Bowl": 1.5, "Cloth": 1, "Vase": 1, "Watch": 1,
        },
        "lamps": {"DeskLamp": 3, "FloorLamp": 1},
    },
    "bathroom": {
        "scene_base": 400,  # ALFRED numbers bathrooms 401-430
        "required": ["SinkBasin", "CounterTop", "Toilet"],
        "receptacles": {
            "Cabinet": (4.0, 8),
            "Drawer": (2.0, 6),
            "Shelf": (1.0, 4),
            "HandTowelHolder": (1.0, 2),
            "TowelHolder": (1.0, 2),
            "GarbageCan": (1.0, 1),
            "ToiletPaperHanger": (1.0, 1),
            "BathtubBasin": (0.8, 1),
            "Dresser": (0.3, 1),
            "SinkBasin": (0.5, 2),
            "CounterTop": (0.0, 1),
            "Toilet": (0.0, 1),
        },
        "objects": {
            "Candle": 2, "Cloth": 3, "DishSponge": 1, "HandTowel": 2, "Plunger": 1, "SoapBar": 3,
            "SoapBottle": 3, "SprayBottle": 2, "ToiletPaper": 3, "Towel": 1.5, "TissueBox": 1,
        },
    },
}

# Where objects start: P(receptacle type | object type), lower-case display names.
PLACEMENT_PRIORS: dict[str, dict[str, float]] = {
    # kitchen
    "apple": {"countertop": 0.35, "fridge": 0.3, "diningtable": 0.25, "garbagecan": 0.05, "sinkbasin": 0.05},
    "bread": {"countertop": 0.5, "diningtable": 0.35, "fridge": 0.1, "garbagecan": 0.05},
    "butterknife": {"drawer": 0.4, "countertop": 0.35, "diningtable": 0.2, "sinkbasin": 0.05},
    "cup": {"cabinet": 0.3, "countertop": 0.25, "diningtable": 0.2, "fridge": 0.1, "sinkbasin": 0.1, "shelf": 0.05},
    "dishsponge": {"sinkbasin": 0.35, "countertop": 0.3, "cabinet": 0.15, "drawer": 0.1, "garbagecan": 0.05,
                   "bathtubbasin": 0.05},
    "egg": {"fridge": 0.45, "countertop": 0.3, "diningtable": 0.15, "garbagecan": 0.05, "sinkbasin": 0.05},
    "fork": {"drawer": 0.45, "countertop": 0.3, "diningtable": 0.2, "sinkbasin": 0.05},
    "kettle": {"stoveburner": 0.6, "countertop": 0.2, "cabinet": 0.15, "shelf": 0.05},
    "knife": {"countertop": 0.45, "drawer": 0.3, "diningtable": 0.2, "sinkbasin": 0.05},
    "ladle": {"drawer": 0.35, "countertop": 0.3, "diningtable": 0.2, "sinkbasin": 0.1, "cabinet": 0.05},
    "lettuce": {"fridge": 0.5, "countertop": 0.3, "diningtable": 0.15, "garbagecan": 0.05},
    "mug": {"cabinet": 0.3, "coffeemachine": 0.2, "countertop": 0.2, "diningtable": 0.1, "sinkbasin": 0.08,
            "shelf": 0.05, "desk": 0.05, "fridge": 0.02},
    "pan": {"stoveburner": 0.5, "cabinet": 0.3, "countertop": 0.15, "sinkbasin": 0.05},
    "peppershaker": {"countertop": 0.35, "cabinet": 0.3, "diningtable": 0.2, "drawer": 0.1, "shelf": 0.05},
    "plate": {"cabinet": 0.35, "countertop": 0.25, "diningtable": 0.2, "coffeetable": 0.05, "fridge": 0.05,
              "sinkbasin": 0.05, "shelf": 0.05},
    "pot": {"stoveburner": 0.5, "cabinet": 0.25, "countertop": 0.15, "sinkbasin": 0.05, "fridge": 0.05},
    "potato": {"countertop": 0.3, "fridge": 0.3, "diningtable": 0.2, "microwave": 0.1, "garbagecan": 0.05,
               "sinkbasin": 0.05},
    "saltshaker": {"countertop": 0.35, "cabinet": 0.3, "diningtable": 0.2, "drawer": 0.1, "shelf": 0.05},
    "soapbottle": {"countertop": 0.35, "cabinet": 0.2, "toilet": 0.2, "shelf": 0.1, "drawer": 0.1,
                   "garbagecan": 0.05},
    "spatula": {"drawer": 0.35, "countertop": 0.35, "diningtable": 0.2, "sinkbasin": 0.1},
    "spoon": {"drawer": 0.4, "countertop": 0.3, "diningtable": 0.2, "sinkbasin": 0.1},
    "tomato": {"fridge": 0.35, "countertop": 0.35, "diningtable": 0.2, "sinkbasin": 0.05, "garbagecan": 0.05},
    "winebottle": {"fridge": 0.3, "countertop": 0.25, "diningtable": 0.2, "cabinet": 0.2, "shelf": 0.05},
    "bowl": {"cabinet": 0.3, "countertop": 0.2, "diningtable": 0.2, "fridge": 0.1, "shelf": 0.1, "sinkbasin": 0.05,
             "desk": 0.05},
    "glassbottle": {"countertop": 0.3, "fridge": 0.2, "cabinet": 0.2, "diningtable": 0.2, "shelf": 0.1},
    # living room / bedroom
    "box": {"coffeetable": 0.3, "sofa": 0.2, "shelf": 0.2, "sidetable": 0.15, "dresser": 0.15},
    "cellphone": {"bed": 0.25, "sidetable": 0.25, "desk": 0.2, "sofa": 0.1, "dresser": 0.1, "drawer": 0.1},
    "creditcard": {"coffeetable": 0.25, "sidetable": 0.2, "desk": 0.15, "drawer": 0.15, "dresser": 0.1, "sofa": 0.1,
                   "armchair": 0.05},
    "keychain": {"coffeetable": 0.25, "sidetable": 0.25, "drawer": 0.2, "dresser": 0.15, "desk": 0.1, "sofa": 0.05},
    "laptop": {"bed": 0.3, "desk": 0.3, "sofa": 0.2, "coffeetable": 0.1, "armchair": 0.1},
    "newspaper": {"coffeetable": 0.3, "sofa": 0.25, "sidetable": 0.2, "armchair": 0.15, "diningtable": 0.1},
    "pillow": {"sofa": 0.45, "bed": 0.3, "armchair": 0.25},
    "remotecontrol": {"coffeetable": 0.35, "sofa": 0.3, "sidetable": 0.15, "armchair": 0.1, "drawer": 0.1},
    "statue": {"shelf": 0.4, "coffeetable": 0.25, "sidetable": 0.2, "dresser": 0.15},
    "vase": {"shelf": 0.45, "coffeetable": 0.2, "sidetable": 0.2, "dresser": 0.15},
    "watch": {"sidetable": 0.3, "coffeetable": 0.2, "dresser": 0.2, "drawer": 0.2, "desk": 0.1},
    "wateringcan": {"shelf": 0.4, "sidetable": 0.3, "coffeetable": 0.3},
    "tissuebox": {"sidetable": 0.3, "dresser": 0.2, "coffeetable": 0.2, "tvstand": 0.1, "toilet": 0.1, "shelf": 0.1},
    "alarmclock": {"sidetable": 0.45, "desk": 0.35, "dresser": 0.1, "shelf": 0.1},
    "baseballbat": {"bed": 0.7, "sidetable": 0.3},
    "basketball": {"bed": 0.5, "desk": 0.2, "sidetable": 0.15, "armchair": 0.15},
    "book": {"desk": 0.3, "bed": 0.2, "shelf": 0.2, "sidetable": 0.15, "drawer": 0.1, "coffeetable": 0.05},
    "cd": {"desk": 0.3, "drawer": 0.3, "shelf": 0.2, "sidetable": 0.1, "safe": 0.1},
    "pen": {"desk": 0.45, "drawer": 0.25, "sidetable": 0.2, "shelf": 0.1},
    "pencil": {"desk": 0.45, "drawer": 0.25, "sidetable": 0.2, "shelf": 0.1},
    "tennisracket": {"bed": 0.5, "desk": 0.3, "sidetable": 0.2},
    "desklamp": {"sidetable": 0.45, "desk": 0.35, "dresser": 0.2},
    "floorlamp": {"sidetable": 0.5, "dresser": 0.25, "desk": 0.25},
    # bathroom
    "candle": {"countertop": 0.3, "toilet": 0.25, "cabinet": 0.2, "shelf": 0.15, "drawer": 0.1},
    "cloth": {"countertop": 0.25, "bathtubbasin": 0.2, "cabinet": 0.2, "sinkbasin": 0.1, "toilet": 0.1,
              "drawer": 0.1, "laundryhamper": 0.05},
    "handtowel": {"handtowelholder": 0.7, "countertop": 0.15, "cabinet": 0.15},
    "plunger": {"cabinet": 1.0},
    "soapbar": {"sinkbasin": 0.3, "bathtubbasin": 0.25, "countertop": 0.2, "toilet": 0.1, "cabinet": 0.1,
                "garbagecan": 0.05},
    "spraybottle": {"toilet": 0.3, "cabinet": 0.3, "countertop": 0.2, "shelf": 0.1, "garbagecan": 0.1},
    "toiletpaper": {"toiletpaperhanger": 0.45, "toilet": 0.2, "cabinet": 0.2, "countertop": 0.1, "shelf": 0.05},
    "towel": {"towelholder": 1.0},
}

SIZES: dict[str, dict[str, tuple[int, int]]] = {
    "small": {"receptacles": (5, 6), "objects": (6, 10)},
    "medium": {"receptacles": (13, 17), "objects": (22, 30)},
    "large": {"receptacles": (28, 32), "objects": (55, 65)},
}

FAMILIES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

FAMILY_ROOMS: dict[str, tuple[str, ...]] = {
    "pick_and_place_simple": ("kitchen", "livingroom", "bedroom", "bathroom"),
    "look_at_obj_in_light": ("livingroom", "bedroom"),
    "pick_clean_then_place_in_recep": ("kitchen", "bathroom"),
    "pick_heat_then_place_in_recep": ("kitchen",),
    "pick_cool_then_place_in_recep": ("kitchen",),
    "pick_two_obj_and_place": ("kitchen", "livingroom", "bedroom", "bathroom"),
}

# Games per family in the official ALFWorld splits (valid: ALFWorld paper Table; the
# paper's 140/134 seen/unseen tasks have exactly these compositions).
FAMILY_PROPORTIONS: dict[str, dict[str, int]] = {
    "train": {"pick_and_place_simple": 790, "look_at_obj_in_light": 308, "pick_clean_then_place_in_recep": 650,
              "pick_heat_then_place_in_recep": 459, "pick_cool_then_place_in_recep": 533,
              "pick_two_obj_and_place": 813},
    "valid_seen": {"pick_and_place_simple": 35, "look_at_obj_in_light": 13, "pick_clean_then_place_in_recep": 27,
                   "pick_heat_then_place_in_recep": 16, "pick_cool_then_place_in_recep": 25,
                   "pick_two_obj_and_place": 24},
    "valid_unseen": {"pick_and_place_simple": 24, "look_at_obj_in_light": 18, "pick_clean_then_place_in_recep": 31,
                     "pick_heat_then_place_in_recep": 23, "pick_cool_then_place_in_recep": 21,
                     "pick_two_obj_and_place": 17},
}

# How often a receptacle type is a task's destination (relative; unlisted types: 1.0).
# Surfaces people put things on dominate, as in ALFRED's task mix.
DESTINATION_WEIGHTS: dict[str, float] = {
    "CounterTop": 3.0, "DiningTable": 3.0, "SideTable": 3.0, "Desk": 3.0, "CoffeeTable": 3.0, "Shelf": 2.0,
    "Cabinet": 2.0, "Dresser": 2.0, "Drawer": 1.5, "Bed": 2.0, "Sofa": 2.0, "ArmChair": 1.5, "Toilet": 2.0,
    "Fridge": 1.5, "GarbageCan": 1.0, "Microwave": 0.7, "SinkBasin": 0.7, "StoveBurner": 0.7,
}

# The appliance each transformation uses (never the destination of that task).
APPLIANCES: dict[str, str] = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}

OPENABLE = frozenset({"Cabinet", "Drawer", "Fridge", "Microwave", "Safe"})
LAMPS = frozenset({"DeskLamp", "FloorLamp"})

_NAME = re.compile(r"^\s*([a-z]+)(?:\s+\d+)?\s*$")


def object_type(name: str) -> str:
    """The type of an ALFWorld object or receptacle name: "mug 1" -> "mug", "Mug" -> "mug".

    Unknown shapes come back lower-cased and stripped of a trailing instance number.
    """
    text = " ".join(name.lower().split())
    match = _NAME.match(text)
    if match:
        return match.group(1)
    return re.sub(r"\s+\d+$", "", text)


def placement_priors() -> dict[str, dict[str, float]]:
    """A copy of `PLACEMENT_PRIORS` (object type -> {receptacle type: probability})."""
    return {obj: dict(receps) for obj, receps in PLACEMENT_PRIORS.items()}

"""The shop's vocabulary: categories, product types, attributes and option values.

This is the public "facet list" of the simulated store, the kind of vocabulary a
shopper sees in any category sidebar. The catalogue generator draws products from it;
the Belief parser uses it to read constraints out of an instruction. It contains no
per-product or per-goal information.

Vocabulary rules (checked by `vocabulary_conflicts`, asserted in the tests), so that
WebShop's fuzzy reward treats distinct phrases as distinct:
- within one product type, no attribute fuzzy-matches another (rapidfuzz
  token_set_ratio <= 85 after WebShop-style preprocessing) or contains another;
- within one option group other than `size` (matched exactly, as in WebShop), no two
  values fuzzy-match.
"""

from __future__ import annotations

from dataclasses import dataclass, field

APPAREL_COLORS = (
    "black", "white", "navy", "grey", "red", "green", "beige", "khaki", "burgundy", "olive",
    "brown", "pink", "purple", "sky blue", "charcoal", "teal", "mustard", "ivory",
)
APPAREL_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large")
SHOE_SIZES = ("6", "7", "8", "9", "10", "11", "12", "13")
DEVICE_COLORS = ("black", "white", "silver", "blue", "rose gold", "midnight green", "graphite")
WOOD_FINISHES = ("walnut", "espresso", "white", "black", "natural", "grey wash", "cherry")


@dataclass(frozen=True)
class ProductType:
    """One kind of product (WebShop's `query`)."""

    name: str  # lowercase type phrase used in instructions and as WebShop's `query` ("button-down shirt")
    title: str  # the phrase as it appears in product titles ("Button-Down Shirt")
    breadcrumb: tuple[str, ...]  # product_category path below the category root
    attributes: tuple[str, ...]  # type-specific attribute pool (the category's shared pool is added)
    options: dict[str, tuple[str, ...]]  # option group -> values offered somewhere in the store
    price: tuple[float, float]  # range of base prices (dollars)
    audience: tuple[str, ...] = ()  # title prefixes such as "Men's"
    plural: bool = False  # "some running shoes" rather than "a running shoes"
    priced_group: str | None = None  # option group whose values may change the price (larger sizes cost more)
    excluded_shared: tuple[str, ...] = ()  # category-wide attributes that make no sense for this type


@dataclass(frozen=True)
class Category:
    """A store department (WebShop's `category`); also the task family."""

    name: str
    root: tuple[str, ...]  # breadcrumb prefix
    brands: tuple[str, ...]
    shared_attributes: tuple[str, ...]  # attributes every type of the category may have
    benefits: tuple[str, ...]  # bullet-point endings (never contain an attribute phrase)
    fillers: tuple[str, ...]  # neutral title words
    blurbs: tuple[str, ...]  # neutral description sentences
    types: tuple[ProductType, ...] = field(default_factory=tuple)


FASHION = Category(
    name="fashion",
    root=("Clothing, Shoes & Jewelry",),
    brands=("Ridgeline", "Calder & Co", "Northwind", "Bellwether", "Hollis", "Marlowe", "Sable Row", "Juniper Lane",
            "Copperfield", "Westbrook", "Aster Mills", "Lowell Street", "Fenwick", "Harbor Thread"),
    shared_attributes=("machine wash", "quick drying", "moisture wicking", "everyday wear", "stretch fabric"),
    benefits=("for all-day comfort", "that holds its shape wash after wash", "for a clean, tailored look",
              "made to move with you", "for work, travel and weekends", "with a soft hand feel"),
    fillers=("Classic", "Casual", "Essential", "Premium", "Modern", "Signature"),
    blurbs=("Designed in small batches and checked stitch by stitch.",
            "A wardrobe staple you will reach for again and again.",
            "Cut from carefully selected materials and finished by hand.",
            "Pairs easily with the rest of your closet."),
    types=(
        ProductType("button-down shirt", "Button-Down Shirt", ("Men", "Clothing", "Shirts"),
                    ("long sleeve", "slim fit", "wrinkle free", "spread collar", "chest pocket"),
                    {"color": APPAREL_COLORS, "size": APPAREL_SIZES}, (14, 65), audience=("Men's",),
                    priced_group="size"),
        ProductType("polo shirt", "Polo Shirt", ("Men", "Clothing", "Shirts"),
                    ("short sleeve", "regular fit", "ribbed collar", "pique knit", "side vents"),
                    {"color": APPAREL_COLORS, "size": APPAREL_SIZES}, (12, 48), audience=("Men's",)),
        ProductType("yoga pants", "Yoga Pants", ("Women", "Clothing", "Active", "Pants"),
                    ("high waist", "tummy control", "side pockets", "squat proof", "ankle length"),
                    {"color": APPAREL_COLORS, "size": APPAREL_SIZES}, (15, 55), audience=("Women's",), plural=True,
                    priced_group="size"),
        ProductType("running shoes", "Running Shoes", ("Men", "Shoes", "Athletic"),
                    ("non slip", "lightweight", "breathable mesh", "arch support", "rubber sole"),
                    {"color": APPAREL_COLORS, "size": SHOE_SIZES}, (35, 140), audience=("Men's",), plural=True,
                    excluded_shared=("stretch fabric",)),
        ProductType("winter jacket", "Winter Jacket", ("Women", "Clothing", "Coats & Jackets"),
                    ("water resistant", "detachable hood", "fleece lined", "windproof", "zipper pockets"),
                    {"color": APPAREL_COLORS, "size": APPAREL_SIZES}, (45, 190), audience=("Women's",),
                    priced_group="size"),
        ProductType("maxi dress", "Maxi Dress", ("Women", "Clothing", "Dresses"),
                    ("floral print", "v neck", "elastic waist", "side split", "flowy chiffon"),
                    {"color": APPAREL_COLORS, "size": APPAREL_SIZES}, (20, 75), audience=("Women's",)),
        ProductType("hiking boots", "Hiking Boots", ("Men", "Shoes", "Outdoor"),
                    ("waterproof leather", "ankle support", "lace up", "slip resistant", "steel shank"),
                    {"color": APPAREL_COLORS, "size": SHOE_SIZES}, (50, 180), audience=("Men's",), plural=True,
                    excluded_shared=("machine wash", "stretch fabric", "moisture wicking")),
        ProductType("crew socks", "Crew Socks", ("Unisex", "Clothing", "Socks"),
                    ("cushioned sole", "arch compression", "odor control", "reinforced heel", "seamless toe"),
                    {"color": APPAREL_COLORS, "size": ("small", "medium", "large")}, (8, 30), plural=True),
    ),
)

BEAUTY = Category(
    name="beauty",
    root=("Beauty & Personal Care",),
    brands=("Lumiere", "Verdant Lab", "Aurelia", "Pure Theory", "Solenne", "Maison Bloom", "Clarin Row", "Nordvik",
            "Elm & Oak", "Halcyon", "Vellum", "Saltwater Apothecary"),
    shared_attributes=("cruelty free", "paraben free", "long lasting", "travel size", "dermatologist tested"),
    benefits=("for a fresh, healthy look", "that layers well with your routine", "backed by our quality promise",
              "for morning and evening use", "made with care in small batches"),
    fillers=("Daily", "Professional", "Luxe", "Essential", "Signature", "Studio"),
    blurbs=("Formulated and tested in our own laboratory.", "A simple step that fits any routine.",
            "Packaged in a recyclable container.", "Loved by customers for its gentle feel."),
    types=(
        ProductType("face moisturizer", "Face Moisturizer", ("Skin Care", "Face", "Moisturizers"),
                    ("hyaluronic acid", "oil free", "spf 30", "sensitive skin", "fragrance free"),
                    {"size": ("1 fl oz", "1.7 fl oz", "3.4 fl oz", "8 fl oz")}, (12, 70), priced_group="size"),
        ProductType("shampoo", "Shampoo", ("Hair Care", "Shampoo & Conditioner", "Shampoos"),
                    ("sulfate free", "dry scalp", "color safe", "argan oil", "tea tree"),
                    {"scent": ("lavender", "coconut", "mint", "unscented", "citrus", "vanilla"),
                     "size": ("8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz")}, (7, 38), priced_group="size"),
        ProductType("lipstick", "Lipstick", ("Makeup", "Lips", "Lipstick"),
                    ("matte finish", "waterproof formula", "high pigment", "shea butter", "smudge proof"),
                    {"color": ("ruby red", "nude", "coral", "berry", "mauve", "plum", "rosewood", "brick")}, (6, 32)),
        ProductType("perfume", "Eau de Parfum Perfume", ("Fragrance", "Women", "Eau de Parfum"),
                    ("natural spray", "fresh citrus", "woody notes", "gift box", "vegan formula"),
                    {"size": ("1 fl oz", "1.7 fl oz", "3.4 fl oz")}, (25, 140), priced_group="size"),
        ProductType("nail polish", "Nail Polish", ("Makeup", "Nails", "Nail Polish"),
                    ("quick dry", "chip resistant", "gel finish", "non toxic", "glossy shine"),
                    {"color": ("ruby red", "nude", "coral", "berry", "mauve", "plum", "lilac", "mint green",
                               "jet black")},
                    (5, 22)),
        ProductType("hair dryer", "Hair Dryer", ("Hair Care", "Styling Tools", "Hair Dryers"),
                    ("ionic technology", "diffuser attachment", "low noise", "cool shot", "foldable handle"),
                    {"color": ("black", "white", "rose gold", "pink", "lilac")}, (20, 120)),
        ProductType("body lotion", "Body Lotion", ("Skin Care", "Body", "Lotions"),
                    ("cocoa butter", "non greasy", "dry skin", "fast absorbing", "vitamin rich"),
                    {"scent": ("lavender", "coconut", "unscented", "citrus", "vanilla", "rose"),
                     "size": ("8 fl oz", "16 fl oz", "32 fl oz")}, (6, 30), priced_group="size"),
        ProductType("makeup brush set", "Makeup Brush Set", ("Tools & Accessories", "Makeup Brushes"),
                    ("synthetic bristles", "vegan", "storage case", "easy clean", "wooden handles"),
                    {"color": ("black", "rose gold", "pink", "marble white", "champagne")}, (9, 45)),
    ),
)

GROCERY = Category(
    name="grocery",
    root=("Grocery & Gourmet Food",),
    brands=("Harvest Table", "Green Acre", "Sunmill", "Copper Kettle", "Wild Meadow", "Baker's Field",
            "Blue Ridge Farms", "Terra Foods", "Little Orchard", "Golden Spoon", "Riverbend", "Prairie Pantry"),
    shared_attributes=("gluten free", "non gmo", "usda organic", "keto friendly", "individually wrapped"),
    benefits=("for snacking at home or on the go", "packed fresh for great taste",
              "made from carefully sourced ingredients", "perfect for the whole family", "a pantry favorite"),
    fillers=("Classic", "Original", "Gourmet", "Family Size", "Artisan", "Premium"),
    blurbs=("Made by a family-owned company since 1987.", "Store in a cool, dry place after opening.",
            "Great on its own or as part of a recipe.", "Every batch is tasted before it ships."),
    types=(
        ProductType("protein bar", "Protein Bar", ("Snacks & Sweets", "Bars", "Protein Bars"),
                    ("high protein", "low carb", "plant based", "no added sugar", "dairy free"),
                    {"flavor": ("chocolate chip", "peanut butter", "cookie dough", "salted caramel", "birthday cake",
                                "lemon"),
                     "size": ("6 count", "12 count", "24 count")}, (9, 45), plural=False, priced_group="size"),
        ProductType("coffee beans", "Coffee Beans", ("Beverages", "Coffee", "Whole Coffee Beans"),
                    ("dark roast", "fair trade", "single origin", "low acid", "arabica"),
                    {"size": ("12 ounce", "2 pound", "5 pound")}, (10, 60), plural=True, priced_group="size",
                    excluded_shared=("individually wrapped",)),
        ProductType("green tea", "Green Tea", ("Beverages", "Tea", "Green Tea"),
                    ("loose leaf", "antioxidant rich", "decaf", "tea bags", "japanese sencha"),
                    {"flavor": ("jasmine", "mint", "lemon", "ginger", "original"),
                     "size": ("20 count", "50 count", "100 count")}, (5, 30), priced_group="size"),
        ProductType("olive oil", "Olive Oil", ("Pantry Staples", "Oils", "Olive Oil"),
                    ("extra virgin", "cold pressed", "glass bottle", "first harvest", "unfiltered"),
                    {"size": ("16.9 fl oz", "25.4 fl oz", "33.8 fl oz", "101 fl oz")}, (9, 55), priced_group="size",
                    excluded_shared=("individually wrapped",)),
        ProductType("granola", "Granola", ("Breakfast Foods", "Cereals", "Granola"),
                    ("whole grain", "high fiber", "no artificial flavors", "ancient grains", "low sodium"),
                    {"flavor": ("honey almond", "maple pecan", "cocoa crunch", "blueberry", "coconut cashew"),
                     "size": ("11 ounce", "2 pack", "4 pack")}, (5, 28), priced_group="size"),
        ProductType("trail mix", "Trail Mix", ("Snacks & Sweets", "Nuts & Seeds", "Trail Mix"),
                    ("resealable bag", "lightly salted", "heart healthy", "roasted almonds", "no preservatives"),
                    {"flavor": ("sweet and salty", "tropical", "mountain berry", "chocolate lovers", "classic"),
                     "size": ("8 ounce", "26 ounce", "3 pack")}, (6, 32), priced_group="size"),
        ProductType("hot sauce", "Hot Sauce", ("Pantry Staples", "Condiments", "Hot Sauce"),
                    ("extra hot", "small batch", "vinegar based", "sugar free", "fermented peppers"),
                    {"flavor": ("habanero", "chipotle", "garlic", "ghost pepper", "jalapeno"),
                     "size": ("5 fl oz", "2 pack", "6 pack")}, (5, 30), priced_group="size",
                    excluded_shared=("individually wrapped",)),
        ProductType("dark chocolate", "Dark Chocolate", ("Snacks & Sweets", "Chocolate", "Chocolate Bars"),
                    ("70 percent cacao", "fair trade", "gift box", "sugar free", "single origin cocoa"),
                    {"flavor": ("sea salt", "almond", "orange", "mint", "raspberry", "espresso"),
                     "size": ("3 pack", "6 pack", "12 pack")}, (6, 40), priced_group="size"),
    ),
)

ELECTRONICS = Category(
    name="electronics",
    root=("Electronics",),
    brands=("Voltix", "Arcwave", "Nexora", "Brightline", "Kestrel Audio", "Zentra", "Orbit Labs", "Tandem",
            "Helio", "Quanta", "Stratus", "Pixelforge"),
    shared_attributes=("usb c", "compact design"),
    benefits=("for home, office and travel", "backed by an 18-month warranty", "tested for everyday reliability",
              "with a premium build", "that just works out of the box"),
    fillers=("Pro", "Ultra", "Plus", "Max", "Lite", "Gen 2"),
    blurbs=("Includes everything you need to get started.", "Our support team is available around the clock.",
            "Certified for safety and quality.", "Engineered and tested in-house."),
    types=(
        ProductType("wireless earbuds", "Wireless Earbuds", ("Headphones", "Earbud Headphones"),
                    ("noise cancelling", "charging case", "touch control", "built-in microphone", "sweatproof"),
                    {"color": DEVICE_COLORS}, (18, 150), plural=True),
        ProductType("phone case", "Phone Case", ("Cell Phones & Accessories", "Cases"),
                    ("shockproof", "slim profile", "kickstand", "card holder", "raised edges"),
                    {"color": DEVICE_COLORS, "model": ("iphone 15", "galaxy s24", "pixel 8", "oneplus 12")}, (7, 35)),
        ProductType("power bank", "Power Bank", ("Cell Phones & Accessories", "Chargers", "Portable Power Banks"),
                    ("fast charging", "led display", "dual output", "airline approved", "wireless charging"),
                    {"color": ("black", "white", "blue"), "size": ("10000mah", "20000mah", "26800mah")}, (15, 70),
                    priced_group="size"),
        ProductType("bluetooth speaker", "Bluetooth Speaker", ("Portable Audio", "Speakers"),
                    ("waterproof", "deep bass", "stereo pairing", "long battery life", "outdoor use"),
                    {"color": DEVICE_COLORS}, (20, 160)),
        ProductType("smart watch", "Smart Watch", ("Wearable Technology", "Smartwatches"),
                    ("heart rate monitor", "sleep tracking", "built-in gps", "water resistant", "blood oxygen"),
                    {"color": DEVICE_COLORS, "size": ("41mm", "45mm")}, (40, 250), priced_group="size"),
        ProductType("hdmi cable", "HDMI Cable", ("Accessories & Supplies", "Cables", "HDMI Cables"),
                    ("4k hdr", "high speed", "braided nylon", "gold plated", "ethernet channel"),
                    {"size": ("3 feet", "6 feet", "10 feet", "15 feet")}, (6, 30), priced_group="size"),
        ProductType("wireless mouse", "Wireless Mouse", ("Computers & Accessories", "Mice"),
                    ("ergonomic design", "silent click", "rechargeable battery", "usb receiver", "adjustable dpi"),
                    {"color": DEVICE_COLORS}, (9, 60)),
        ProductType("laptop stand", "Laptop Stand", ("Computers & Accessories", "Laptop Accessories", "Stands"),
                    ("adjustable height", "aluminum alloy", "foldable", "heat dissipation", "anti slip pads"),
                    {"color": ("black", "silver", "grey")}, (15, 70)),
    ),
)

FURNITURE = Category(
    name="furniture",
    root=("Home & Kitchen", "Furniture"),
    brands=("Oakhaven", "Linden & Pine", "Studio Nord", "Hearthstone", "Birchwood", "Casa Verde", "Modulo", "Greystone",
            "Fieldhouse", "Alder Home", "Kinfolk Living", "Tidewater"),
    shared_attributes=("easy assembly", "living room", "space saving", "solid wood"),
    benefits=("built to last for years", "that fits any decor", "with all hardware included",
              "designed for modern homes", "with a 1-year warranty"),
    fillers=("Modern", "Rustic", "Contemporary", "Classic", "Scandinavian", "Industrial"),
    blurbs=("Ships in one box with step-by-step instructions.",
            "Each piece is inspected before it leaves our workshop.",
            "Wipe clean with a damp cloth.", "Designed to complement the rest of the collection."),
    types=(
        ProductType("bookshelf", "Bookshelf", ("Home Office Furniture", "Bookcases"),
                    ("5 tier", "anti tip kit", "open shelves", "metal frame", "adjustable shelves"),
                    {"color": WOOD_FINISHES}, (35, 220), priced_group=None),
        ProductType("office chair", "Office Chair", ("Home Office Furniture", "Desk Chairs"),
                    ("lumbar support", "adjustable armrests", "mesh back", "headrest", "high back"),
                    {"color": ("black", "grey", "white", "blue", "pink")}, (60, 320)),
        ProductType("coffee table", "Coffee Table", ("Living Room Furniture", "Tables"),
                    ("lift top", "storage shelf", "tempered glass", "round shape", "hidden compartment"),
                    {"color": WOOD_FINISHES}, (45, 260)),
        ProductType("bed frame", "Bed Frame", ("Bedroom Furniture", "Beds & Frames"),
                    ("no box spring needed", "headboard", "noise free", "under bed storage", "metal platform"),
                    {"color": ("black", "white", "grey", "walnut"), "size": ("twin", "full", "queen", "king")},
                    (90, 420), priced_group="size", excluded_shared=("living room",)),
        ProductType("tv stand", "TV Stand", ("Living Room Furniture", "TV & Media Furniture"),
                    ("cable management", "led lights", "sliding doors", "storage cabinet", "fits 65 inch tv"),
                    {"color": WOOD_FINISHES}, (60, 300)),
        ProductType("bar stool", "Bar Stool", ("Kitchen & Dining Room Furniture", "Stools"),
                    ("counter height", "swivel seat", "footrest", "faux leather", "upholstered seat"),
                    {"color": ("black", "grey", "brown", "white", "navy"), "size": ("set of 2", "set of 4")},
                    (40, 260), priced_group="size", excluded_shared=("living room",)),
        ProductType("shoe rack", "Shoe Rack", ("Entryway Furniture", "Shoe Organizers"),
                    ("stackable", "10 tier", "bamboo", "entryway bench", "dust cover"),
                    {"color": ("black", "white", "natural", "brown")}, (18, 110),
                    excluded_shared=("living room",)),
        ProductType("floor lamp", "Floor Lamp", ("Lighting", "Floor Lamps"),
                    ("dimmable", "remote control", "arc design", "reading light", "energy efficient"),
                    {"color": ("black", "white", "brass", "silver", "bronze")}, (30, 180)),
    ),
)

CATEGORIES: tuple[Category, ...] = (FASHION, BEAUTY, GROCERY, ELECTRONICS, FURNITURE)
PRODUCT_TYPES: dict[str, ProductType] = {t.name: t for c in CATEGORIES for t in c.types}
CATEGORY_OF_TYPE: dict[str, Category] = {t.name: c for c in CATEGORIES for t in c.types}
EXACT_MATCH_GROUPS = ("size",)  # WebShop matches these option groups exactly, others fuzzily


def attribute_pool(product_type: ProductType) -> tuple[str, ...]:
    """Every attribute a product of this type may have."""
    shared = CATEGORY_OF_TYPE[product_type.name].shared_attributes
    return product_type.attributes + tuple(a for a in shared if a not in product_type.excluded_shared)


def vocabulary_conflicts(threshold: int = 85) -> list[str]:
    """Pairs of phrases the fuzzy reward could confuse (must be empty)."""
    from rapidfuzz import fuzz, utils

    def clash(a: str, b: str) -> bool:
        return a in b or b in a or fuzz.token_set_ratio(a, b, processor=utils.default_process) > threshold

    problems = []
    for product_type in PRODUCT_TYPES.values():
        pool = attribute_pool(product_type)
        problems += [f"{product_type.name}: attributes {a!r} / {b!r}" for i, a in enumerate(pool) for b in pool[i + 1:]
                     if clash(a, b)]
        problems += [f"{product_type.name}: attribute {a!r} is part of the type name" for a in pool
                     if a in product_type.name or a in product_type.title.lower()]
        for group, values in product_type.options.items():
            if group in EXACT_MATCH_GROUPS:
                continue
            problems += [f"{product_type.name}.{group}: {a!r} / {b!r}" for i, a in enumerate(values)
                         for b in values[i + 1:] if clash(a, b)]
    return problems

//! Word lists for the text generator, written for this project.
//!
//! They only need to look like English to a tokenizer: common words in
//! several parts of speech, so that generated text has the word-frequency
//! shape a byte-level BPE expects, plus syllables to coin proper names.

pub(crate) const NOUNS: &[&str] = &[
    "account", "address", "afternoon", "agreement", "airport", "answer", "apple", "archive",
    "argument", "arrival", "article", "artist", "audience", "author", "autumn", "balance", "basket",
    "battery", "beach", "bicycle", "bird", "blanket", "board", "boat", "bottle", "boundary",
    "branch", "bridge", "brother", "budget", "building", "cabinet", "camera", "candle", "canyon",
    "captain", "carpet", "castle", "ceiling", "century", "chamber", "channel", "chapter", "chart",
    "chemist", "child", "circle", "citizen", "climate", "clock", "cloud", "coast", "coffee",
    "collection", "college", "committee", "community", "company", "compass", "computer", "concert",
    "contract", "corner", "cottage", "council", "country", "courage", "cousin", "crystal",
    "culture", "curtain", "customer", "daughter", "decision", "desert", "designer", "detail",
    "device", "diamond", "dinner", "direction", "distance", "doctor", "document", "dragon",
    "drawer", "driver", "editor", "election", "elephant", "engine", "engineer", "evening",
    "example", "experiment", "explorer", "factory", "family", "farmer", "feather", "festival",
    "field", "figure", "finger", "forest", "fountain", "friend", "galaxy", "garden", "gardener",
    "gate", "glacier", "glass", "government", "guitar", "hammer", "harbor", "harvest", "highway",
    "history", "holiday", "horizon", "hospital", "hotel", "island", "journal", "journey", "judge",
    "kettle", "kitchen", "ladder", "lake", "language", "lantern", "lawyer", "leader", "lecture",
    "letter", "library", "lighthouse", "machine", "magazine", "manager", "market", "meadow",
    "measure", "meeting", "memory", "merchant", "message", "method", "minute", "mirror", "moment",
    "monument", "morning", "mountain", "museum", "musician", "neighbor", "network", "newspaper",
    "notebook", "number", "ocean", "office", "orchard", "orchestra", "painter", "palace", "paper",
    "parent", "passenger", "pattern", "pencil", "people", "pepper", "picture", "pilot", "planet",
    "platform", "pocket", "poem", "policy", "pottery", "problem", "process", "professor", "program",
    "project", "question", "rabbit", "railway", "reader", "recipe", "record", "region", "report",
    "republic", "research", "river", "road", "rocket", "saddle", "sailor", "sample", "scholar",
    "school", "science", "season", "secret", "sentence", "server", "shadow", "signal", "silence",
    "singer", "sister", "soldier", "station", "statue", "stone", "story", "stranger", "stream",
    "street", "student", "summer", "surface", "system", "teacher", "telescope", "temple", "theory",
    "thunder", "ticket", "tower", "tradition", "traveler", "treasure", "tunnel", "umbrella",
    "universe", "valley", "village", "violin", "visitor", "voyage", "wagon", "weather", "window",
    "winter", "witness", "workshop", "writer", "year", "harness", "signal", "lattice", "quarry",
    "ledger", "beacon", "compiler", "kernel",
];

pub(crate) const VERBS: &[&str] = &[
    "accept", "admire", "allow", "announce", "answer", "arrange", "arrive", "balance", "believe",
    "borrow", "build", "calculate", "carry", "change", "check", "choose", "claim", "climb",
    "collect", "compare", "complete", "consider", "contain", "continue", "copy", "count", "cover",
    "create", "cross", "debate", "decide", "defend", "deliver", "describe", "design", "discover",
    "discuss", "divide", "draw", "drive", "earn", "edit", "enjoy", "examine", "expect", "explain",
    "explore", "fill", "find", "finish", "fix", "follow", "gather", "guide", "handle", "help",
    "hold", "imagine", "improve", "include", "inspect", "invent", "invite", "join", "keep",
    "launch", "learn", "leave", "lift", "listen", "measure", "mention", "move", "notice", "observe",
    "offer", "open", "order", "organize", "paint", "pass", "plan", "plant", "prepare", "present",
    "protect", "publish", "question", "reach", "read", "receive", "record", "reduce", "remember",
    "repair", "replace", "report", "request", "rescue", "return", "review", "sail", "save",
    "search", "select", "send", "share", "show", "sketch", "solve", "sort", "study", "suggest",
    "support", "teach", "test", "track", "trade", "train", "translate", "travel", "visit", "wander",
    "watch", "weigh", "welcome", "wonder", "write",
];

pub(crate) const ADJECTIVES: &[&str] = &[
    "ancient", "angry", "anxious", "bright", "brief", "broad", "busy", "calm", "careful",
    "cheerful", "clever", "cold", "colorful", "common", "complex", "crowded", "curious", "dark",
    "deep", "delicate", "distant", "dusty", "eager", "early", "elegant", "empty", "enormous",
    "entire", "faint", "familiar", "famous", "fast", "fierce", "formal", "fragile", "free", "fresh",
    "friendly", "gentle", "giant", "golden", "grand", "gray", "green", "hidden", "honest", "huge",
    "humble", "icy", "important", "narrow", "local", "lonely", "loud", "lucky", "modern", "modest",
    "mysterious", "native", "nervous", "noble", "odd", "open", "orange", "ordinary", "patient",
    "plain", "polite", "powerful", "precise", "private", "proud", "public", "purple", "quick",
    "quiet", "rapid", "rare", "recent", "remote", "rough", "round", "royal", "rusty", "sacred",
    "scarlet", "secret", "serious", "shallow", "sharp", "shiny", "silent", "silver", "simple",
    "slow", "small", "smooth", "soft", "solid", "sparse", "steady", "steep", "strange", "strict",
    "strong", "sudden", "sunny", "swift", "tall", "tender", "thick", "thin", "tiny", "tired",
    "tough", "tropical", "unusual", "urgent", "vast", "velvet", "vivid", "warm", "weary", "white",
    "wide", "wild", "wise", "wooden", "young", "yellow", "final", "hollow", "nimble",
];

pub(crate) const ADVERBS: &[&str] = &[
    "again", "almost", "already", "always", "barely", "boldly", "briefly", "calmly", "carefully",
    "clearly", "closely", "eagerly", "easily", "entirely", "eventually", "finally", "firmly",
    "gently", "gladly", "gradually", "hardly", "honestly", "later", "loudly", "mostly", "nearly",
    "never", "often", "only", "openly", "patiently", "perhaps", "politely", "promptly", "quickly",
    "quietly", "rarely", "rather", "really", "recently", "seldom", "simply", "slowly", "softly",
    "soon", "steadily", "still", "suddenly", "surely", "swiftly", "together", "usually", "warmly",
    "wisely", "yesterday",
];

pub(crate) const PREPOSITIONS: &[&str] = &[
    "above", "across", "after", "against", "along", "among", "around", "at", "before", "behind",
    "below", "beneath", "beside", "between", "beyond", "by", "during", "for", "from", "in",
    "inside", "into", "near", "of", "on", "outside", "over", "past", "through", "toward", "under",
    "until", "upon", "with", "within", "without",
];

pub(crate) const DETERMINERS: &[&str] = &[
    "the", "the", "the", "a", "this", "that", "every", "each", "one", "another", "some", "our",
    "their", "her", "his", "my", "your", "no",
];

pub(crate) const PLURAL_DETERMINERS: &[&str] = &[
    "the", "the", "these", "those", "some", "many", "our", "their", "her", "no", "all", "few",
];

pub(crate) const CONJUNCTIONS: &[&str] = &[
    "and", "but", "so", "yet", "because", "while", "although", "since", "unless", "whereas",
];

pub(crate) const PRONOUNS: &[&str] = &[
    "she", "he", "they", "we", "I", "you", "it", "nobody",
];

pub(crate) const UNITS: &[&str] = &[
    "meters", "kilometers", "grams", "liters", "hours", "minutes", "seconds", "days", "weeks",
    "percent", "degrees", "volts", "pages", "miles", "tons", "bytes",
];

pub(crate) const MONTHS: &[&str] = &[
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
];

pub(crate) const SPEECH_VERBS: &[&str] = &[
    "said", "asked", "replied", "whispered", "noted", "wrote", "added", "insisted",
];

/// Syllables that coin names of people and places ("Valmora", "Tesh").
pub(crate) const SYLLABLES: &[&str] = &[
    "al", "an", "ar", "bel", "bor", "ca", "cor", "da", "del", "dor", "el", "en", "fa", "fen", "gal",
    "gor", "ha", "hel", "is", "ka", "kel", "la", "lin", "lo", "ma", "mar", "mo", "na", "nor", "o",
    "pa", "per", "qui", "ra", "ren", "ri", "sa", "sel", "sha", "ta", "tel", "tor", "u", "va", "vel",
    "vin", "wen", "ya", "zan", "zor", "thi", "bra", "cla", "dre", "fro", "gri",
];

pub(crate) const PLACE_SUFFIXES: &[&str] = &[
    "", "", "", " Valley", " Bay", " Harbor", " Heights", " Springs", " Falls", " Ridge", "ton",
    "ville", "burg", "ford", "stead",
];
